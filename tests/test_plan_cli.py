"""The offline plan CLI: `python -m infra plan --stack NAME [--out DIR] [--config-file PATH]`."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import infra.plan as plan_module
from facts import catalog
from facts.paths import TOOLS_BIN
from infra.__main__ import main
from tests.helpers import NS, ROOT
from tests.plan_memo import fresh_plans

_RUN_CLI = plan_module.run_cli
FILES = ("resources.json", "manifests.yaml", "outputs.json", "cost.json", "aws-model.json")
RECORD_KEYS = {"type", "name", "id", "parent", "dependsOn", "inputs"}
# Component resources (no physical id): the project's own, the remote components of pulumi-eks,
# and Pulumi Kubernetes' chart/kustomize/yaml components.
COMPONENT_PREFIXES = (
    "gputraining:components:",
    "eks:index:",
    "kubernetes:helm.sh/v4:",
    "kubernetes:kustomize/v2:",
    "kubernetes:yaml/v2:",
)


def _run_main(argv: list[str], mp: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """Run the CLI entry point in-process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    # run_cli's stdout/stderr defaults are bound when infra.plan is imported; hand it buffers.
    mp.setattr(plan_module, "run_cli", lambda stack, dest, **kw: _RUN_CLI(stack, dest, stdout=out, stderr=err, **kw))
    rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _subprocess_env(seed: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PULUMI_CONFIG"}
    env["PYTHONHASHSEED"] = seed
    return env


# ----------------------------------------------------------------------------------------------
# A valid stack: dev
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_runs(tmp_path_factory):
    """The dev stack planned twice in-process and once in a subprocess with another hash seed."""
    base = tmp_path_factory.mktemp("plan-dev")
    current = os.environ.get("PYTHONHASHSEED")
    seed = "4243" if current == "4242" else "4242"
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra", "plan", "--stack", "dev", "--out", str(base / "sub")],
        cwd=ROOT,
        env=_subprocess_env(seed),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        runs = {}
        # Two runs of their own (not a kept plan handed out twice): that they agree is the point.
        with pytest.MonkeyPatch.context() as mp, fresh_plans():
            for name in ("a", "b"):
                rc, out, err = _run_main(["plan", "--stack", "dev", "--out", str(base / name)], mp)
                runs[name] = {"rc": rc, "stdout": out, "stderr": err, "dir": base / name}
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    runs["sub"] = {"rc": proc.returncode, "stdout": out, "stderr": err, "dir": base / "sub"}
    return runs


@pytest.fixture(scope="module")
def resources(dev_runs) -> list[dict]:
    return json.loads((dev_runs["a"]["dir"] / "resources.json").read_text())


@pytest.fixture(scope="module")
def outputs(dev_runs) -> dict:
    return json.loads((dev_runs["a"]["dir"] / "outputs.json").read_text())


def test_plan_exits_0_and_writes_its_files(dev_runs):
    run = dev_runs["a"]
    assert run["rc"] == 0, run["stderr"]
    assert run["stderr"] == ""
    # releases.yaml: what the Helm releases install, rendered with the real helm when it is there.
    helm = (TOOLS_BIN / "helm").exists()
    assert sorted(p.name for p in run["dir"].iterdir()) == sorted(FILES + (("releases.yaml",) if helm else ()))
    assert f"Wrote {run['dir']}/resources.json" in run["stdout"]


def test_resources_json_is_an_array_of_records_with_exactly_the_documented_keys(resources):
    assert isinstance(resources, list) and resources
    for r in resources:
        assert isinstance(r, dict) and RECORD_KEYS <= set(r) <= RECORD_KEYS | {"options"}, r.get("name")
        assert isinstance(r["type"], str) and isinstance(r["name"], str)
        assert isinstance(r["inputs"], dict) and isinstance(r["dependsOn"], list)


def test_ids_are_null_exactly_for_components(resources):
    for r in resources:
        component = r["type"].startswith(COMPONENT_PREFIXES)
        if component:
            assert r["id"] is None, (r["type"], r["name"])
        else:
            assert isinstance(r["id"], str) and r["id"], (r["type"], r["name"])
    types = {r["type"] for r in resources}
    assert {
        "gputraining:components:Network",
        "gputraining:components:Cluster",
        "eks:index:Cluster",
        "eks:index:ManagedNodeGroup",
    } <= types
    assert any(r["id"] is not None and r["type"] == "aws:ec2/vpc:Vpc" for r in resources)


def test_references_name_resources_in_the_file(resources):
    present = {(r["type"], r["name"]) for r in resources}
    assert len(present) == len(resources), "(type, name) must identify a resource"
    parented = 0
    for r in resources:
        if r["parent"] is not None:
            parented += 1
            assert set(r["parent"]) == {"type", "name"}
            assert (r["parent"]["type"], r["parent"]["name"]) in present, (r["name"], r["parent"])
        for d in r["dependsOn"]:
            assert set(d) == {"type", "name"}
            assert (d["type"], d["name"]) in present, (r["name"], d)
    assert parented > 0
    # Top-level resources are the components the blueprint creates (and providers).
    assert {"type": "gputraining:components:Network", "name": "network"} in [r["parent"] for r in resources]


def test_manifests_yaml_holds_the_kubernetes_objects_of_resources_json(dev_runs, resources):
    text = (dev_runs["a"]["dir"] / "manifests.yaml").read_text()
    docs = [d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d is not None]
    expected = [
        r["inputs"]
        for r in resources
        if r["type"].startswith("kubernetes:")
        and not r["type"].startswith(("kubernetes:helm.sh/", "pulumi:providers"))
        and "apiVersion" in r["inputs"]
        and "kind" in r["inputs"]
    ]
    assert docs == expected
    assert all("apiVersion" in d and "kind" in d for d in docs)


def test_outputs_json(outputs):
    assert outputs["clusterName"] == "gpu-training-dev"
    assert outputs["kubeconfig"] == "[secret]"
    assert outputs["gpuAvailabilityZone"] in outputs["availabilityZones"]
    assert len(outputs["availabilityZones"]) == 2
    assert set(outputs["nodeGroupNames"]) >= {"system", "p4d", "p3dn"}


def _written(run: dict) -> list[str]:
    return sorted(p.name for p in run["dir"].iterdir())


def test_two_runs_give_byte_identical_files(dev_runs):
    assert _written(dev_runs["a"]) == _written(dev_runs["b"])
    for f in _written(dev_runs["a"]):  # releases.yaml too, where helm renders it
        assert (dev_runs["a"]["dir"] / f).read_bytes() == (dev_runs["b"]["dir"] / f).read_bytes(), f
    assert dev_runs["a"]["stdout"].replace(str(dev_runs["a"]["dir"]), "OUT") == dev_runs["b"]["stdout"].replace(
        str(dev_runs["b"]["dir"]), "OUT"
    )


def test_subprocess_with_another_hash_seed_gives_byte_identical_files(dev_runs):
    sub = dev_runs["sub"]
    assert sub["rc"] == 0, sub["stderr"]
    assert _written(sub) == _written(dev_runs["a"])
    for f in _written(sub):
        assert (sub["dir"] / f).read_bytes() == (dev_runs["a"]["dir"] / f).read_bytes(), f
    assert sub["stdout"].replace(str(sub["dir"]), "OUT") == dev_runs["a"]["stdout"].replace(
        str(dev_runs["a"]["dir"]), "OUT"
    )


def test_summary_names_the_gpu_az_and_each_gpu_group(dev_runs, outputs):
    stdout = dev_runs["a"]["stdout"]
    cfg = plan_module.load_config("dev")
    gpu_az = outputs["gpuAvailabilityZone"]
    assert gpu_az == "us-west-2b"  # the first us-west-2 AZ offering both p4d and p3dn
    assert f"GPU availability zone: {gpu_az} (chosen automatically)" in stdout
    lines = stdout.splitlines()
    assert cfg.gpu_node_groups
    for g in cfg.gpu_node_groups:
        it = catalog.BUILTIN[g.instance_type]
        (line,) = [ln for ln in lines if ln.split()[:2] == [g.name, g.instance_type]]
        assert f"{it.gpus} x {it.gpu_model}" in line, line
        assert f"{g.efa_interfaces} EFA interface" in line, line
    assert "4 EFA interfaces" in [ln for ln in lines if ln.split()[:1] == ["p4d"]][0]
    assert "1 EFA interface," in [ln for ln in lines if ln.split()[:1] == ["p3dn"]][0]
    assert "Stack gpu-training/dev in us-west-2" in stdout


# ----------------------------------------------------------------------------------------------
# Invalid config, unknown stacks
# ----------------------------------------------------------------------------------------------

BAD_STACK = textwrap.dedent(
    """\
    config:
      aws:region: us-west-2
      gpu-training:foo: 1
      gpu-training:network:
        vpcCidr: 10.0.0.0/33
      gpu-training:cluster:
        kubernetesVersion: "1.29"
      gpu-training:gpuNodeGroups:
        - name: a
          instanceType: p4d.24xlarge
        - name: b
          instanceType: p4d.24xlarge
          maxSize: lots
    """
)
BAD_KEYS = (f"{NS}:foo", f"{NS}:network.vpcCidr", f"{NS}:cluster.kubernetesVersion", f"{NS}:gpuNodeGroups[b].maxSize")

# The pinned AZ does not offer p3dn: refused with the config's other checks (the offline plan's recorded
# offerings; `pulumi up`'s program asks AWS).
MISPLACED_STACK = textwrap.dedent(
    """\
    config:
      aws:region: us-west-2
      gpu-training:gpuAvailabilityZone: us-west-2a
      gpu-training:gpuNodeGroups:
        - name: v100
          instanceType: p3dn.24xlarge
    """
)


@pytest.fixture
def project_root(tmp_path, monkeypatch) -> Path:
    """A temporary project root (Pulumi.yaml plus a bad and a misplaced stack) that the CLI reads."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    (root / "Pulumi.bad.yaml").write_text(BAD_STACK)
    (root / "Pulumi.misplaced.yaml").write_text(MISPLACED_STACK)
    original = plan_module.plan
    # run_cli calls plan(stack) with the default root, bound to the real project at import.
    monkeypatch.setattr(plan_module, "plan", lambda stack, root=root: original(stack, root))
    return root


def test_invalid_config_exits_2_with_every_key_on_stderr_and_writes_nothing(project_root, tmp_path, monkeypatch):
    out = tmp_path / "out"
    rc, stdout, stderr = _run_main(["plan", "--stack", "bad", "--out", str(out)], monkeypatch)
    assert rc == 2
    assert stdout == ""
    assert "stack 'bad'" in stderr and f"{len(BAD_KEYS)} problem(s)" in stderr
    for key in BAD_KEYS:
        assert f"  - {key}: " in stderr, key
    assert "'10.0.0.0/33'" in stderr and "'1.29'" in stderr and "'lots'" in stderr
    assert "Traceback" not in stderr
    assert not out.exists()


def test_placement_refused_with_the_config_exits_2_without_a_traceback(project_root, tmp_path, monkeypatch):
    out = tmp_path / "out"
    rc, stdout, stderr = _run_main(["plan", "--stack", "misplaced", "--out", str(out)], monkeypatch)
    assert rc == 2
    assert stdout == ""
    assert f"{NS}:gpuAvailabilityZone" in stderr
    assert "'us-west-2a' does not offer p3dn.24xlarge" in stderr
    assert "Traceback" not in stderr
    assert not out.exists()


def test_invalid_config_in_a_subprocess(tmp_path):
    """The real process: exit status 2, messages on stderr, no traceback, nothing written."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    (root / "Pulumi.bad.yaml").write_text(BAD_STACK)
    out = tmp_path / "out"
    script = (
        "import sys; from pathlib import Path; import infra.plan as p; from infra.__main__ import main; "
        "orig = p.plan; p.plan = lambda stack: orig(stack, Path(sys.argv[1])); sys.exit(main(sys.argv[2:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(root), "plan", "--stack", "bad", "--out", str(out)],
        cwd=ROOT,
        env=_subprocess_env("0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    for key in BAD_KEYS:
        assert key in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_unknown_stack_exits_2_and_lists_the_stacks(tmp_path, monkeypatch):
    out = tmp_path / "out"
    rc, stdout, stderr = _run_main(["plan", "--stack", "nope", "--out", str(out)], monkeypatch)
    assert rc == 2
    assert stdout == ""
    assert "Pulumi.nope.yaml" in stderr
    listed = stderr.split("stacks here:", 1)[1].strip()
    assert "dev" in [s.strip() for s in listed.split(",")]
    assert "Traceback" not in stderr
    assert not out.exists()


def test_unknown_stack_lists_the_stacks_of_the_project_root(project_root, tmp_path, monkeypatch):
    rc, _, stderr = _run_main(["plan", "--stack", "prod", "--out", str(tmp_path / "out")], monkeypatch)
    assert rc == 2
    assert "stacks here: bad, misplaced" in stderr
    assert not (tmp_path / "out").exists()


def test_unknown_stack_in_a_subprocess(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "infra", "plan", "--stack", "nope", "--out", str(out)],
        cwd=ROOT,
        env=_subprocess_env("0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Pulumi.nope.yaml" in proc.stderr and "dev" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_stack_is_required():
    with pytest.raises(SystemExit) as info:
        main(["plan"])
    assert info.value.code == 2


def test_stack_file_that_is_not_yaml_exits_2_with_the_reason(tmp_path, monkeypatch, capsys):
    from infra import plan as plan_mod

    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.broken.yaml").write_text("config:\n  gpu-training:network:\n    vpcCidr: 10.0.0.0/16: x\n")
    monkeypatch.setattr(plan_mod, "PROJECT_ROOT", tmp_path)
    code = plan_mod.run_cli("broken", str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert code == 2
    assert "Pulumi.broken.yaml is not valid YAML" in err and "line 3" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------
# --config-file: a stack file outside the project root (the examples, planned in place)
# ----------------------------------------------------------------------------------------------


def test_help_lists_the_config_file_option(capsys):
    with pytest.raises(SystemExit) as info:
        main(["plan", "--help"])
    assert info.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--config-file PATH" in help_text and "instead of Pulumi.<stack>.yaml in the project root" in help_text


def test_a_stack_file_elsewhere_plans_as_the_same_file_in_the_project_root(dev_runs, tmp_path, monkeypatch):
    """dev's stack file copied elsewhere and named by --config-file: the same plan, file for file
    (the project, Pulumi.yaml, is still the one in the project root)."""
    elsewhere = tmp_path / "elsewhere" / "my-dev.yaml"
    elsewhere.parent.mkdir()
    shutil.copy(ROOT / "Pulumi.dev.yaml", elsewhere)
    out = tmp_path / "out"
    rc, stdout, stderr = _run_main(
        ["plan", "--stack", "dev", "--out", str(out), "--config-file", str(elsewhere)], monkeypatch
    )
    assert (rc, stderr) == (0, "")
    same = dev_runs["a"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in same["dir"].iterdir())
    for path in same["dir"].iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes(), path.name
    assert stdout.replace(str(out), "OUT") == same["stdout"].replace(str(same["dir"]), "OUT")


def test_config_file_that_is_missing_or_invalid_exits_2_and_writes_nothing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    missing = tmp_path / "Pulumi.nope.yaml"
    rc, stdout, stderr = _run_main(
        ["plan", "--stack", "nope", "--out", str(out), "--config-file", str(missing)], monkeypatch
    )
    assert (rc, stdout) == (2, "")
    assert stderr == f"error: no stack file {missing}\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_STACK)
    rc, stdout, stderr = _run_main(
        ["plan", "--stack", "bad", "--out", str(out), "--config-file", str(bad)], monkeypatch
    )
    assert (rc, stdout) == (2, "")
    for key in BAD_KEYS:
        assert f"  - {key}: " in stderr, key
    assert "Traceback" not in stderr
    assert not out.exists()
