"""The docs stay true to the code.

The job pages (docs/jobs.md and the pages it leads to, tests/helpers.py JOB_DOCS, read as one text): every
```yaml block whose first line starts with ``- name:`` is a list of jobs exactly as
it appears under ``gpu-training:jobs:``. Each such block must pass the config validator on its own, and
all of them together must produce, in one offline plan, the objects their kinds emit. The block that
starts with ``gpu-training:gpuNodeGroups:`` holds the node groups the examples assume. The per-kind
field tables must list every field of the kind's model with its default.

docs/config.md: the configuration reference tables must mention every top-level config key and every
field of the section models. README.md and docs/*.md: every link inside the repository leads to a
file, and to a heading of it where it names one.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import jobs as J
from facts import catalog
from stacks import config as C
from stacks.config import job_entries as jobs_config
from stacks.config import reference
from tests.helpers import ALL_JOBS, DOC_TEXT, JOB_BLOCKS, JOBS_MARKER, ROOT, minimal_values, run_stack
from tests.helpers import DOC_GROUPS as GROUPS
from tests.helpers import with_doc_jobs as values_with

README = ROOT / "README.md"
CONFIG_DOC = ROOT / "docs" / "config.md"
PROJECT = "gpu-training"


def _block_id(block: list[dict[str, Any]]) -> str:
    return "+".join(str(j.get("name")) for j in block)


# ---------------------------------------------------------------------------------------------
# The job pages: the examples
# ---------------------------------------------------------------------------------------------


def test_the_docs_have_job_examples_of_every_kind_with_unique_names():
    assert JOB_BLOCKS, f"no ```yaml block starting with {JOBS_MARKER!r} on the job pages"
    assert all(isinstance(b, list) and all(isinstance(j, dict) for j in b) for b in JOB_BLOCKS)
    assert {j.get("kind") for j in ALL_JOBS} == set(J.JOB_KINDS)
    names = [j.get("name") for j in ALL_JOBS]
    assert len(names) == len(set(names)), f"example job names must be unique across the docs: {names}"


def test_the_assumed_node_groups_are_valid_config():
    cfg = C.load(minimal_values(gpuNodeGroups=GROUPS), PROJECT, "docs")
    assert [g.name for g in cfg.gpu_node_groups] == [g["name"] for g in GROUPS]


@pytest.mark.parametrize("block", JOB_BLOCKS, ids=_block_id)
def test_each_example_is_accepted_by_the_config_validator(block):
    try:
        cfg = C.load(values_with(block), PROJECT, "docs")
    except C.ConfigError as err:
        pytest.fail(f"job page example {_block_id(block)} is rejected:\n{err}")
    assert [j.name for j in cfg.jobs] == [j["name"] for j in block]


RBAC = "rbac.authorization.k8s.io/v1"
# What each kind emits, as (apiVersion, kind) of the Kubernetes objects labelled with the job.
EMITS: dict[str, set[tuple[str, str]]] = {
    "mpi": {("kubeflow.org/v2beta1", "MPIJob")},
    "nccl-test": {("kubeflow.org/v2beta1", "MPIJob")},
    "pytorch-elastic": {("kubeflow.org/v1", "PyTorchJob")},
    "paddle": {("kubeflow.org/v1", "PaddleJob")},
    "data-stage": {("v1", "ServiceAccount"), ("batch/v1", "Job")},
    "tensorboard": {("apps/v1", "Deployment"), ("v1", "Service")},
}


def test_every_kind_has_an_expected_emission():
    assert set(EMITS) == set(J.JOB_KINDS)


@pytest.fixture(scope="module")
def examples_plan():
    """ONE offline plan of the real program with every example job of the docs together."""
    return run_stack(values_with(ALL_JOBS), stack="docs")


def _objects_of(plan, name: str) -> list[dict[str, Any]]:
    return [
        o for o in plan.kubernetes_objects() if (o.get("metadata") or {}).get("labels", {}).get(J.JOB_LABEL) == name
    ]


def _on_sagemaker(job: dict[str, Any]) -> bool:
    return job.get("runtime") == "sagemaker"


def test_the_plan_lists_exactly_the_enabled_examples(examples_plan):
    enabled = [j["name"] for j in ALL_JOBS if j.get("enabled", True) and not _on_sagemaker(j)]
    assert examples_plan.outputs["jobs"] == enabled
    on_sagemaker = [j["name"] for j in ALL_JOBS if j.get("enabled", True) and _on_sagemaker(j)]
    assert on_sagemaker, "the docs show SageMaker examples"
    assert sorted(examples_plan.outputs["sagemakerJobs"]) == sorted(on_sagemaker)


def test_each_sagemaker_example_is_one_training_job_and_no_kubernetes_object(examples_plan):
    for job in (j for j in ALL_JOBS if _on_sagemaker(j)):
        assert _objects_of(examples_plan, job["name"]) == []
        started = [
            r
            for r in examples_plan.of_type("pulumi-python:dynamic/gputraining:SageMakerTrainingJob")
            if r.inputs["request"]["TrainingJobName"].startswith(job["name"] + "-")
        ]
        assert len(started) == 1, job["name"]


@pytest.mark.parametrize("job", [j for j in ALL_JOBS if not _on_sagemaker(j)], ids=lambda j: str(j.get("name")))
def test_each_example_produces_the_objects_of_its_kind(examples_plan, job):
    objects = _objects_of(examples_plan, job["name"])
    if not job.get("enabled", True):
        assert objects == [], "a disabled job emits nothing"
        return
    # A job with progress or checkpoints also ships the progress guard in a ConfigMap <name>-guard, an elastic
    # job on the stack's etcd python-etcd in a ConfigMap <name>-python-etcd.
    # The fabric check (docs/performance.md; on by default for these kinds and mpi on EFA with 2+ nodes) adds the guard
    # and its ServiceAccount, Role and RoleBinding <name>-guard.
    fabric = any(
        "--fabric" in str(o.get("spec")) for o in objects if o["kind"] in ("PyTorchJob", "PaddleJob", "MPIJob")
    )
    accounts = {("v1", "ServiceAccount"), (RBAC, "Role"), (RBAC, "RoleBinding")} if fabric else set()
    guarded = bool(job.get("progress") or job.get("checkpoints")) or fabric
    on_etcd = job["kind"] == "pytorch-elastic" and job.get("rendezvous", "etcd") != "c10d"
    config_maps = {f"{job['name']}-guard"} if guarded else set()
    config_maps |= {f"{job['name']}-python-etcd"} if on_etcd else set()
    expected = EMITS[job["kind"]] | ({("v1", "ConfigMap")} if config_maps else set()) | accounts
    assert {(o["apiVersion"], o["kind"]) for o in objects} == expected
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"} == config_maps
    for o in objects:
        guard = fabric and o["metadata"]["name"] == f"{job['name']}-guard"
        assert o["kind"] == "ConfigMap" or o["metadata"]["name"] == job["name"] or guard
        assert o["metadata"]["namespace"] == "training"
    if job["kind"] == "data-stage":
        types = {(r.type, r.name) for r in examples_plan.records}
        assert ("aws:iam/role:Role", f"jobs-{job['name']}-s3-read") in types
        assert ("aws:eks/podIdentityAssociation:PodIdentityAssociation", f"jobs-{job['name']}-pod-identity") in types


def test_gpu_examples_get_the_groups_gpus(examples_plan):
    """The derivations the docs describe, spot-checked on the plan: GPUs = the type's, EFA only
    where the group has it and the job does not turn it off."""
    groups = {g["name"]: catalog.get(g["instanceType"]) for g in GROUPS}
    checked = 0
    for job in ALL_JOBS:
        if job["kind"] not in J.GPU_KINDS or not job.get("enabled", True) or _on_sagemaker(job):
            continue
        (cr,) = [o for o in _objects_of(examples_plan, job["name"]) if o["metadata"]["name"] == job["name"]]
        it = groups[job["nodeGroup"]]
        workers = [
            c
            for replica in next(v for k, v in cr["spec"].items() if k.endswith("ReplicaSpecs")).values()
            for c in replica["template"]["spec"]["containers"]
            if "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
        ]
        assert workers
        for c in workers:
            limits = c["resources"]["limits"]
            assert limits["nvidia.com/gpu"] == it.gpus
            efa = 0 if job.get("efa") is False else it.efa_interfaces
            assert limits.get("vpc.amazonaws.com/efa", 0) == efa
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            assert (env.get("FI_PROVIDER") == "efa") == bool(efa)
            assert (env.get("FI_EFA_USE_DEVICE_RDMA") == "1") == bool(efa and it.efa_rdma)
        checked += 1
    assert checked


# ---------------------------------------------------------------------------------------------
# The job pages: the field tables
# ---------------------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _section(text: str, heading: re.Pattern[str]) -> str:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if heading.match(line))
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].startswith("#") and len(lines[i]) - len(lines[i].lstrip("#")) <= level
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def _field_table(kind: str) -> dict[str, tuple[str, str]]:
    """field alias -> (default cell, meaning cell) of the table in the kind's section."""
    section = _section(DOC_TEXT, re.compile(rf"^#+ `{re.escape(kind)}`"))
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        m = re.fullmatch(r"`([A-Za-z]+)`", cells[0])
        if m and len(cells) == 3:
            assert m.group(1) not in rows, f"{kind}: field {m.group(1)} listed twice"
            rows[m.group(1)] = (cells[1], cells[2])
    return rows


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


@pytest.mark.parametrize("kind", list(J.JOB_KINDS))
def test_the_field_table_of_each_kind_lists_every_field_with_its_default(kind):
    model = J.JOB_KINDS[kind]
    table = _field_table(kind)
    aliases = {f.alias or n: f for n, f in model.model_fields.items()}
    assert set(table) == set(aliases), (
        f"{kind}: missing {sorted(set(aliases) - set(table))}, unknown {sorted(set(table) - set(aliases))}"
    )
    wrong = []
    for alias, f in aliases.items():
        default_cell, meaning = table[alias]
        if f.is_required():
            if default_cell != "required":
                wrong.append(f"{alias}: required, docs say {default_cell!r}")
            continue
        default = f.get_default(call_default_factory=True)
        if default is not None and f"`{_render(default)}`" not in default_cell:
            wrong.append(f"{alias}: default `{_render(default)}`, docs say {default_cell!r}")
    assert f"`{kind}`" in table["kind"][1]
    assert not wrong, f"{kind}: " + "; ".join(wrong)


def _sagemaker_table() -> dict[str, tuple[str, str]]:
    """field alias -> (default cell, meaning cell) of the `sagemaker` fields table."""
    section = _section(DOC_TEXT, re.compile(r"^#+ `sagemaker` fields"))
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        cells = _cells(line) if line.startswith("|") else []
        m = re.fullmatch(r"`([A-Za-z][A-Za-z0-9]*)`", cells[0]) if cells else None
        if m and len(cells) == 3:
            assert m.group(1) not in rows, f"sagemaker: field {m.group(1)} listed twice"
            rows[m.group(1)] = (cells[1], cells[2])
    return rows


def _aliases(model: Any) -> set[str]:
    return {f.alias or n for n, f in model.model_fields.items()}


def test_the_sagemaker_table_lists_every_field_with_its_spelling_and_default():
    """One spelling per key: the table's keys are exactly the ones the model accepts (volumeSizeGiB,
    not volumeSizeGib), with their defaults."""
    table = _sagemaker_table()
    assert set(table) == _aliases(J.SageMakerOptions)
    assert "volumeSizeGiB" in table
    for alias, f in ((f.alias or n, f) for n, f in J.SageMakerOptions.model_fields.items()):
        default = f.get_default(call_default_factory=True)
        if default not in (None, []):
            assert f"`{_render(default)}`" in table[alias][0], alias


def _braced_keys(text: str) -> set[str]:
    """The keys of every `{a, b: c, d}` group in ``text`` (a group's inner groups left out)."""
    keys = set()
    for group in re.findall(
        r"\{([^{}]*)\}",
        re.sub(r"\{[^{}]*\{[^{}]*\}[^{}]*\}", lambda m: m.group(0).split(":", 1)[1] if ":" in m.group(0) else "", text),
    ):
        for part in group.split(","):
            key = part.split(":", 1)[0].strip().strip("`")
            if key:
                keys.add(key)
    return keys


# Where the docs spell the keys of the nested models: the field whose cell lists them, the model.
NESTED_KEYS = [("volumes", J.VolumeMount), ("secretEnv", J.SecretKeyRef), ("inputs", J.S3Input)]


@pytest.mark.parametrize("field, model", NESTED_KEYS, ids=[f for f, _ in NESTED_KEYS])
def test_every_nested_key_the_tables_name_is_accepted(field, model):
    """The `{...}` key lists in the tables' cells name only keys the model accepts, in its spelling."""
    cells = [row[1] for kind in J.JOB_KINDS for name, row in _field_table(kind).items() if name == field]
    cells += [row[1] for name, row in _sagemaker_table().items() if name == field]
    assert cells, field
    named: set[str] = set()
    for cell in cells:
        named |= {k for k in _braced_keys(cell) if k != "NAME"}
    assert named, field
    assert named <= _aliases(model), f"{field}: {sorted(named - _aliases(model))} are not keys of {model.__name__}"


def test_every_key_of_the_nested_models_is_documented():
    """... and every key those models accept is named in the docs, in the same spelling."""
    for _, model in NESTED_KEYS:
        for alias in _aliases(model):
            assert f"`{alias}`" in DOC_TEXT or re.search(rf"[{{,]\s*{alias}\b", DOC_TEXT), f"{model.__name__}.{alias}"


def test_a_spelling_the_docs_do_not_use_is_refused():
    """The Python names and other spellings of a key are no keys of the stack file."""
    ok = {
        "name": "sm",
        "kind": "mpi",
        "runtime": "sagemaker",
        "nodeGroup": "p4d",
        "image": ALL_JOBS[0]["image"],
        "command": ["python", "/opt/ml/code/a.py"],
    }
    for wrong in ("volumeSizeGib", "volume_size_gib", "VolumeSizeGiB"):
        with pytest.raises(C.ConfigError) as err:
            C.load(values_with([{**ok, "sagemaker": {"outputPath": "s3://b/o/", wrong: 200}}]), PROJECT, "docs")
        assert f"unknown key {wrong!r}" in str(err.value) and "volumeSizeGiB" in str(err.value)
    with pytest.raises(C.ConfigError) as err:
        C.load(values_with([{**ok, "node_group": "p4d"}]), PROJECT, "docs")
    assert "unknown key 'node_group'" in str(err.value)


def test_the_shared_field_types_are_described():
    for model in (J.VolumeMount, J.SecretKeyRef):
        for name, f in model.model_fields.items():
            assert re.search(
                rf"\b{re.escape(f.alias or name)}\b", _section(DOC_TEXT, re.compile(r"^## Conventions"))
            ), f"{model.__name__}.{name}"


def test_the_instance_table_matches_the_catalog():
    section = _section(DOC_TEXT, re.compile(r"^## What is derived from the node group"))
    rows = {}
    for line in section.splitlines():
        cells = _cells(line) if line.startswith("|") else []
        if len(cells) == 4 and re.fullmatch(r"`[a-z0-9.-]+`", cells[0]):
            rows[cells[0].strip("`")] = cells[1:]
    assert set(rows) == set(catalog.GPU_TYPES)
    for name, (gpus, efa, rdma) in rows.items():
        it = catalog.get(name)
        assert int(gpus) == it.gpus, name
        assert (0 if efa == "none" else int(efa)) == it.efa_interfaces, name
        assert rdma == ("yes" if it.efa_rdma else "no"), name


def test_the_validation_section_names_the_refused_keys():
    section = _section(DOC_TEXT, re.compile(r"^## Validation"))
    for key in [*jobs_config.DERIVED_KEYS, *J.EFA_ENV_NAMES, "NCCL_DEBUG"]:
        assert f"`{key}`" in section, key


# ---------------------------------------------------------------------------------------------
# docs/config.md: the configuration reference
# ---------------------------------------------------------------------------------------------


def _readme_block() -> str:
    text = CONFIG_DOC.read_text()
    start, end = text.index(reference.BEGIN), text.index(reference.END) + len(reference.END)
    return text[start:end]


def _readme_keys() -> list[str]:
    """The first-column keys of the generated tables; the second table's are gpuNodeGroups[] keys."""
    keys, table = [], 0
    for line in _readme_block().splitlines():
        if line.startswith("| key |"):
            table += 1
        m = re.match(r"^\| `([^`]+)` \|", line)
        if m:
            keys.append(m.group(1) if table == 1 else f"gpuNodeGroups[].{m.group(1)}")
    return keys


def _resolve(path: str) -> bool:
    """Whether a dotted key (``a.b[].c``) names a field of the config models."""
    if path == "aws:region":
        return True
    model: Any = C.StackConfig
    for part in path.split("."):
        part = part.removesuffix("[]")
        if model is None:
            return False
        field = next((f for n, f in model.model_fields.items() if part == (f.alias or n)), None)
        if field is None:
            return False
        model = reference.model_in(field.annotation)
        if part == "jobs":
            model = None
    return True


def _all_model_paths(model: Any, prefix: str = "") -> set[str]:
    """Every key of the stack file, walking the models independently of the generator."""
    out = set()
    for n, f in model.model_fields.items():
        if model is C.StackConfig and n in ("project", "stack", "region"):
            continue
        key = prefix + (f.alias or n)
        inner = reference.model_in(f.annotation)
        is_list = getattr(f.annotation, "__origin__", None) is list
        if inner is None or n == "jobs":
            out.add(key)
            continue
        if is_list or f.default is None:
            out.add(key + ("[]" if is_list else ""))
        out |= _all_model_paths(inner, key + ("[]." if is_list else "."))
    return out


def test_the_configuration_reference_is_the_generated_one():
    """docs/config.md's block between the markers is what the models generate now, as
    `scripts/config_reference.py --check` reads it (once, nothing around it)."""
    text = CONFIG_DOC.read_text()
    assert text.count(reference.BEGIN) == 1 and text.count(reference.END) == 1
    start, end = text.index(reference.BEGIN), text.index(reference.END) + len(reference.END)
    assert text[start:end] == reference.markdown(), "run: .venv/bin/python scripts/config_reference.py --write"
    assert reference.BEGIN not in README.read_text(), "the key tables live in docs/config.md"


def test_every_documented_key_exists_in_the_models():
    keys = _readme_keys()
    assert len(keys) > 50
    assert [k for k in keys if not _resolve(k)] == []
    assert not _resolve("network.noSuchKey") and not _resolve("gpuNodeGroups[].taints[].colour")


def test_no_config_key_is_left_undocumented():
    documented = set(_readme_keys())
    missing = sorted(_all_model_paths(C.StackConfig) - documented)
    assert missing == [], f"docs/config.md does not document: {missing}"
    assert {"network.vpcCidr", "storage.fsx.s3.bucket", "gpuNodeGroups[].taints[].effect", "jobs"} <= documented


def test_every_config_field_has_a_one_line_description():
    for model in (
        C.StackConfig,
        C.NetworkConfig,
        C.ClusterConfig,
        C.SystemNodeGroupConfig,
        C.GpuNodeGroupConfig,
        C.Taint,
        C.PlacementGroupConfig,
    ):
        for name, field in model.model_fields.items():
            assert field.description and "\n" not in field.description, f"{model.__name__}.{name}"


# ---------------------------------------------------------------------------------------------
# Links between the docs
# ---------------------------------------------------------------------------------------------

LINKED_DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]


def _anchors(path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file: lower case, punctuation dropped,
    spaces to hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    out = set()
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_inside_the_repository_resolves(doc):
    text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists() or anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert broken == [], f"{doc.relative_to(ROOT)}: {broken}"


def test_the_anchor_rule_reads_headings_as_github_does(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A `b`: c, d\n## 1. Add a GPU node group\n## A `b`: c, d\n")
    assert _anchors(page) == {"a-b-c-d", "1-add-a-gpu-node-group", "a-b-c-d-1"}
