"""The offline plan reads a stack file exactly as the Pulumi CLI does, and hands the program what
`pulumi up` hands it (stacks/config/stackfile.py, yaml_decode.py, yaml_resolve.py).

Sources the expectations are read from:

- yaml.v3: github.com/go-yaml/yaml at v3.0.1 (f6f7691b1fdeb513f56608cd2c32c51f8194bf51), the
  version pulumi/pulumi's sdk/go.mod requires: resolve.go (the resolver), decode.go (aliases,
  merges, duplicate keys) and decode_test.go (unmarshalTests, unmarshalErrorTests, mergeTests,
  mergeTestsNested, limitTests), cited by line below ("decode_test.go:59");
- the Pulumi CLI: github.com/pulumi/pulumi (1b5949891b3cefcb9974752b24a5ecef0acc86c8)
  sdk/go/common/workspace/loaders.go LoadProjectStackBytes (decode into interface{},
  SimplifyMarshalledProject: text keys only, namespacing, write out and read again),
  sdk/go/common/resource/config/object.go (unmarshalObject: a time.Time becomes its String();
  MarshalString: numbers and booleans as JSON, maps and lists as JSON, strings as they are).

The rows the decode_test.go does not have (quirks of resolve.go's code: 0b-101, 08, 1e400, ...)
were checked against yaml.v3 v3.0.1 built from that source while this was written.
"""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path

import pytest

from facts.problems import ConfigError, Problem, fmt
from infra import plan as plan_mod
from stacks.config import load
from stacks.config.loading import MAX_DEPTH, decode_config_values
from stacks.config.stackfile import StackFileError, engine_config, load_yaml, read_config_value, read_stack_config
from stacks.config.yaml_decode import allowed_alias_ratio, decode
from stacks.config.yaml_resolve import GoTime
from tests.helpers import NS, ROOT, minimal_values

# ----------------------------------------------------------------------------------------------
# Scalars: yaml.v3's resolver
# ----------------------------------------------------------------------------------------------

UTC_2015 = GoTime(2015, 1, 1)

# (plain scalar as written, the value yaml.v3 decodes into interface{}, where it is read from)
RESOLVER_TABLE = [
    ("10", 10, "decode_test.go:56"),
    ("0b10", 2, "decode_test.go:59"),
    ("0xA", 10, "decode_test.go:62"),
    ("4294967296", 4294967296, "decode_test.go:65"),
    ("0.1", 0.1, "decode_test.go:68"),
    (".1", 0.1, "decode_test.go:71"),
    (".Inf", math.inf, "decode_test.go:74"),
    ("-.Inf", -math.inf, "decode_test.go:77"),
    ("-10", -10, "decode_test.go:80"),
    ("-.1", -0.1, "decode_test.go:83"),
    ("6.8523e+5", 685230.0, "decode_test.go:95"),
    ("685.230_15e+03", 685230.15, "decode_test.go:98 (underscores removed)"),
    ("685_230.15", 685230.15, "decode_test.go:101"),
    ("true", True, "decode_test.go:115"),
    ("True", True, "decode_test.go:121"),
    ("FALSE", False, "decode_test.go:130"),
    ("+685_230", 685230, "decode_test.go:155"),
    ("02472256", 685230, "decode_test.go:158 (1.1 octal kept for compatibility, resolve.go:234)"),
    ("-02472256", -685230, "decode_test.go:161"),
    ("0o2472256", 685230, "decode_test.go:164"),
    ("-0o2472256", -685230, "decode_test.go:167"),
    ("0x_0A_74_AE", 685230, "decode_test.go:170"),
    ("0b1010_0111_0100_1010_1110", 685230, "decode_test.go:173"),
    ("-0b101010", -42, "decode_test.go:176"),
    ("-0b1" + "0" * 63, -(2**63), "decode_test.go:179"),
    ("", None, "decode_test.go:190"),
    ("~", None, "decode_test.go:193"),
    ("null", None, "decode_test.go:196"),
    ("! test", "test", "decode_test.go:479 (non-specific tag)"),
    ("!!float 0", 0.0, "decode_test.go:464"),
    ("!!null ''", None, "decode_test.go:470"),
    ("-b_c", "-b_c", "decode_test.go:591"),
    ("+b_c", "+b_c", "decode_test.go:595"),
    ("50cent_of_dollar", "50cent_of_dollar", "decode_test.go:599"),
    ("1:1", "1:1", "decode_test.go:629 (base 60 is unsupported)"),
    ("2015-01-01", UTC_2015, "decode_test.go:732 (implicit timestamp into interface{})"),
    ("!!str 2015-01-01", "2015-01-01", "decode_test.go:707"),
    ('"2015-01-01"', "2015-01-01", "decode_test.go:722"),
    ('!!timestamp "2015-01-01"', UTC_2015, "decode_test.go:727"),
    ("2015-02-24T18:19:39.12Z", GoTime(2015, 2, 24, 18, 19, 39, 120_000_000), "decode_test.go:675"),
    ("2015-2-3T3:4:5Z", GoTime(2015, 2, 3, 3, 4, 5), "decode_test.go:680"),
    ("2015-02-24t18:19:39Z", GoTime(2015, 2, 24, 18, 19, 39), "decode_test.go:685"),
    ("2015-02-24 18:19:39", GoTime(2015, 2, 24, 18, 19, 39), "decode_test.go:690"),
    # resolve.go's resolveMap: only these spellings are booleans; YAML 1.1's are text.
    ("yes", "yes", "resolve.go:52-53, the resolveMap"),
    ("Yes", "Yes", "resolve.go:52-53, the resolveMap"),
    ("no", "no", "resolve.go:52-53, the resolveMap"),
    ("on", "on", "resolve.go:52-53, the resolveMap"),
    ("OFF", "OFF", "resolve.go:52-53, the resolveMap"),
    ("y", "y", "resolve.go:52-53, the resolveMap"),
    ("tRUE", "tRUE", "resolve.go:52-53, the resolveMap"),
    ("nULL", "nULL", "resolve.go:54, the resolveMap"),
    ("22:30", "22:30", "resolve.go:165 (base 60 dropped in YAML 1.2)"),
    ("190:20:30.15", "190:20:30.15", "resolve.go:165"),
    ("0755", 493, "resolve.go:192 (strconv.ParseInt, base 0)"),
    ("0o755", 493, "resolve.go:192"),
    ("0x1F", 31, "resolve.go:192"),
    ("1_000", 1000, "resolve.go:191 (every _ removed first)"),
    ("1__0_", 10, "resolve.go:191"),
    ("08", 8.0, "resolve.go:204 (not octal: yamlStyleFloat, so a float)"),
    ("09.5", 9.5, "resolve.go:204"),
    ("1e3", 1000.0, "resolve.go:204"),
    ("1e400", "1e400", "resolve.go:205 (out of range: ParseFloat fails, so text)"),
    ("18446744073709551615", 2**64 - 1, "resolve.go:200 (ParseUint)"),
    ("18446744073709551616", 1.8446744073709552e19, "resolve.go:204"),
    ("0b-101", -5, "resolve.go:210 (the 0b fallback parses the rest, sign and all)"),
    ("0x", "0x", "resolve.go:264"),
    (".inf", math.inf, "resolve.go:57"),
    ("+.INF", math.inf, "resolve.go:58"),
    (".5_5", 0.55, "resolve.go:175 (Go's ParseFloat takes _ between digits)"),
    ("._5", "._5", "resolve.go:175"),
    ("<<", "<<", "resolve.go:59 (a merge key only where a key is: decode.go isMerge)"),
    ("p4d.24xlarge", "p4d.24xlarge", "resolve.go:264"),
    ("2015-02-30", "2015-02-30", "time.Parse: day out of range, so text"),
    ("2016-02-29", GoTime(2016, 2, 29), "a leap day"),
    ("2015-01-01T00:00:00+25:00", "2015-01-01T00:00:00+25:00", "time.Parse: zone offset hour out of range (Go's format.go)"),
]


@pytest.mark.parametrize("text,expected,source", RESOLVER_TABLE, ids=[row[0] or "(empty)" for row in RESOLVER_TABLE])
def test_scalars_resolve_as_yaml_v3_resolves_them(text, expected, source):
    value = load_yaml(f"v: {text}\n")["v"]
    assert type(value) is type(expected), (text, value, source)
    assert value == expected or (isinstance(expected, float) and math.isnan(expected) and math.isnan(value)), (text, value, source)


def test_nan_is_a_float():
    assert math.isnan(load_yaml("v: .NaN\n")["v"])


def test_a_binary_scalar_is_its_bytes():
    # decode_test.go:635: !!binary gIGC is the bytes 80 81 82; invalid UTF-8 reaches the program as U+FFFD each.
    assert load_yaml("v: !!binary gIGC\n")["v"] == "\ufffd" * 3
    assert load_yaml("v: !!binary aGVsbG8=\n")["v"] == "hello"
    with pytest.raises(StackFileError, match="invalid base64"):
        load_yaml("v: !!binary ==\n")  # decode_test.go:943


def test_an_explicit_tag_that_does_not_fit_is_refused():
    # decode_test.go:936: "cannot decode !!str `error` as a !!float"
    with pytest.raises(StackFileError, match=r"cannot decode !!str `error` as a !!float"):
        load_yaml("v: !!float 'error'\n")
    assert load_yaml("v: !!float '1.1'\n")["v"] == 1.1  # decode_test.go:461
    assert load_yaml("%TAG !y! tag:yaml.org,2002:\n---\nv: !y!int '1'\n")["v"] == 1  # decode_test.go:473


# ----------------------------------------------------------------------------------------------
# What the program gets: the Pulumi CLI's handling after yaml.v3
# ----------------------------------------------------------------------------------------------

# (a config value as written in a stack file, what the program reads after decode_config_values)
PROGRAM_TABLE = [
    ("22:30", "22:30"),  # the issue: PyYAML read 1350
    ("yes", "yes"),
    ("off", "off"),
    ("0755", "493"),  # an int: MarshalString writes its JSON
    ("1_000", "1000"),
    ("1e3", "1000"),  # a float read again as the int 1000
    ("1.50", "1.5"),
    ("-0.0", "0"),
    ("1e21", "1e+21"),
    ("true", "true"),
    ("True", "true"),
    ("~", ""),  # no value: "" (the CLI warns)
    ("''", ""),
    ("'0755'", "0755"),
    ("2024-05-01", "2024-05-01 00:00:00 +0000 UTC"),  # object.go: time.Time -> String()
    ("2001-12-14T21:59:43.10-05:00", "2001-12-14 21:59:43.1 -0500 -0500"),
    ("[1.0, 2.5, 0x10, 1e21, 08]", [1, 2.5, 16, 1e21, 8]),
    ("{b: 1, a: {d: 2024-05-01, c: yes}}", {"a": {"c": "yes", "d": "2024-05-01 00:00:00 +0000 UTC"}, "b": 1}),
    ("{secure: v1:AAAA}", "[secret]"),  # the offline plan cannot decrypt
    ("{a: {secure: v1:AAAA}}", {"a": "[secret]"}),
    ("{secure: 1}", {"secure": 1}),  # not a secret: object.go isSecureValue wants text
    ("'[1, 2]'", [1, 2]),  # text that is JSON: decode_config_values reads it as the program does
]


@pytest.mark.parametrize("text,expected", PROGRAM_TABLE, ids=[row[0] for row in PROGRAM_TABLE])
def test_the_program_gets_what_pulumi_up_gives_it(text, expected):
    value = read_config_value(text)
    assert value == expected and type(value) is type(expected), (text, value)


def test_map_keys_reach_the_program_sorted():
    assert list(read_config_value("{z: 1, a: 2, m: {y: 1, b: 2}}")) == ["a", "m", "z"]


def test_a_quoted_merge_key_is_a_merge_when_the_cli_reads_the_file_again():
    # yaml.v3's encoder writes the text "<<" unquoted (resolve() takes it for text), so the second
    # read in loaders.go merges it.
    assert read_config_value("{'<<': {a: 1, b: 1}, b: 2}") == {"a": 1, "b": 2}
    with pytest.raises(ConfigError, match=r"project:x\.<<: the key '<<' is a merge key"):
        read_config_value("{'<<': 1}")


def test_infinity_and_nan_cannot_reach_the_program():
    for text in (".inf", "[-.Inf]", "{a: .nan}"):
        with pytest.raises(ConfigError, match="json: unsupported value") as err:
            read_config_value(text)
        assert err.value.problems[0].key.startswith("project:x")


def test_the_engine_wire_form_is_text(tmp_path):
    _write(tmp_path, "dev", "config:\n  aws:region: us-west-2\n  gpuAvailabilityZone: 0755\n  gpu-training:config:tags: {b: x, a: y}\n")
    name, wire = engine_config("dev", tmp_path)
    assert name == "gpu-training"
    assert wire == {"aws:region": "us-west-2", f"{NS}:gpuAvailabilityZone": "493", f"{NS}:tags": '{"a":"y","b":"x"}'}
    assert read_stack_config("dev", tmp_path)[1][f"{NS}:tags"] == {"a": "y", "b": "x"}


def test_the_committed_stacks_read_the_same_as_the_program_reads_their_wire_form():
    for stack in ("dev", "prod"):
        _, wire = engine_config(stack, ROOT)
        assert all(isinstance(v, str) for v in wire.values())
        assert read_stack_config(stack, ROOT)[1] == decode_config_values(wire)


# ----------------------------------------------------------------------------------------------
# Stack files the CLI refuses, refused naming the key
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config,key,expect",
    [
        ("  gpu-training:tags:\n    1: a\n", f"{NS}:tags.1", "Pulumi takes only text keys"),
        ("  gpu-training:tags:\n    ~: a\n", f"{NS}:tags.~", "is null in YAML"),
        ("  gpu-training:tags:\n    2024-01-01: a\n", f"{NS}:tags.2024-01-01", "is a timestamp in YAML"),
        ("  gpu-training:etcd:\n    cpu: '1'\n    cpu: '2'\n", f"{NS}:etcd.cpu", "written twice in one map (lines 4 and 5)"),
        ("  gpu-training:etcd:\n    cpu: '1'\n    \"cpu\": '2'\n", f"{NS}:etcd.cpu", "written twice"),  # same text, as yaml.v3 compares
        ("  etcd: {replicas: 1}\n  gpu-training:etcd: {replicas: 3}\n", f"{NS}:etcd", "is set twice"),
        ("  gpu-training:a:b: 1\n", "gpu-training:a:b", "is not a config key"),
        ("  gpu-training:tags: &x\n    a: *x\n", f"{NS}:tags.a", "inside its own anchor &x"),
        ("  gpu-training:tags: {a: *nowhere}\n", f"{NS}:tags.a", "has no anchor &nowhere"),
        ("  gpu-training:tags: &x [*x]\n", f"{NS}:tags[0]", "value contains itself"),
        ("  gpu-training:etcd:\n    <<: 1\n", f"{NS}:etcd", "map merge requires map or sequence of maps"),
        ("  gpu-training:etcd:\n    <<: [[a]]\n", f"{NS}:etcd", "map merge requires map or sequence of maps"),
        ("  gpu-training:tags: {a: .inf}\n", f"{NS}:tags.a", "json: unsupported value"),
        ("  gpu-training:tags: " + "{a: " * 40 + "b" + "}" * 40 + "\n", f"{NS}:tags", f"more than {MAX_DEPTH} levels deep"),
    ],
)
def test_a_stack_file_the_cli_refuses_is_refused_naming_the_key(tmp_path, config, key, expect):
    _write(tmp_path, "bad", "config:\n  aws:region: us-west-2\n" + config)
    with pytest.raises(ConfigError) as err:
        read_stack_config("bad", tmp_path)
    assert any(p.key == key and expect in p.message for p in err.value.problems), err.value.problems


@pytest.mark.parametrize(
    "text,expect",
    [
        ("config:\n  gpu-training:network:\n    vpcCidr: 10.0.0.0/16: x\n", "not valid YAML: line 3, column 25"),
        ("config:\n  gpu-training:jobs:\n    - name: a\n    - {name: [b, }\n", "(reading gpu-training:jobs[1].name"),
        ("other: {1: a}\nconfig:\n  aws:region: us-west-2\n", "at other.1: the key '1'"),
        ("[1, 2]\n", "must be a map with a 'config:' map inside"),
        ("config: 3\n", "must be a map with a 'config:' map inside"),
        (b"config:\n  a: \xff\n", "not valid YAML"),
    ],
)
def test_a_stack_file_that_is_not_a_stack_file_names_the_file_and_where(tmp_path, text, expect):
    _write(tmp_path, "bad", text)
    with pytest.raises(StackFileError) as err:
        read_stack_config("bad", tmp_path)
    assert "Pulumi.bad.yaml" in str(err.value) and expect in str(err.value)


def test_the_file_is_read_as_the_cli_reads_it(tmp_path):
    # a UTF-8 byte order mark (loaders.go readFileStripUTF8BOM), and only the first document
    _write(tmp_path, "odd", b"\xef\xbb\xbfconfig:\n  aws:region: us-west-2\n---\nconfig: {aws:region: eu-west-1}\n")
    assert read_stack_config("odd", tmp_path)[1] == {"aws:region": "us-west-2"}
    _write(tmp_path, "empty", "")
    assert read_stack_config("empty", tmp_path)[1] == {}


# ----------------------------------------------------------------------------------------------
# Merge keys
# ----------------------------------------------------------------------------------------------


def _go_test_block(name: str) -> str:
    """A block of go-yaml's decode_test.go v3.0.1 (mergeTests, mergeTestsNested), as written there."""
    return MERGE_TESTS[name]


MERGE_TESTS = {
    # decode_test.go:1339-1392
    "mergeTests": """
anchors:
  list:
    - &CENTER { "x": 1, "y": 2 }
    - &LEFT   { "x": 0, "y": 2 }
    - &BIG    { "r": 10 }
    - &SMALL  { "r": 1 }
plain:
  "x": 1
  "y": 2
  "r": 10
  label: center/big
mergeOne:
  << : *CENTER
  "r": 10
  label: center/big
mergeMultiple:
  << : [ *CENTER, *BIG ]
  label: center/big
override:
  << : [ *BIG, *LEFT, *SMALL ]
  "x": 1
  label: center/big
shortTag:
  !!merge "<<" : [ *CENTER, *BIG ]
  label: center/big
longTag:
  !<tag:yaml.org,2002:merge> "<<" : [ *CENTER, *BIG ]
  label: center/big
inlineMap:
  << : {"x": 1, "y": 2, "r": 10}
  label: center/big
inlineSequenceMap:
  << : [ *CENTER, {"r": 10} ]
  label: center/big
""",
    # decode_test.go:1440-1466
    "mergeTestsNested": """
mergeouter1: &mergeouter1
    d: 40
    e: 50
mergeouter2: &mergeouter2
    e: 5
    f: 6
    g: 70
mergeinner1: &mergeinner1
    <<: *mergeouter1
    inner:
        a: 1
        b: 2
mergeinner2: &mergeinner2
    <<: *mergeouter2
    inner:
        a: -1
        b: -2
outer:
    <<: [*mergeinner1, *mergeinner2]
    f: 60
    inner:
        a: 10
""",
}


def test_merge_keys_as_yaml_v3s_tests_have_them():
    doc = load_yaml(_go_test_block("mergeTests"))
    want = {"x": 1, "y": 2, "r": 10, "label": "center/big"}  # TestMerge, decode_test.go:1394
    for name, value in doc.items():
        if name != "anchors":
            assert value == want, name
    nested = load_yaml(_go_test_block("mergeTestsNested"))["outer"]
    assert nested == {"f": 60, "inner": {"a": 10}, "d": 40, "e": 50, "g": 70}  # decode_test.go:1519-1527


def test_merge_keys_in_a_job_list_plan_and_a_key_written_twice_is_still_caught(tmp_path, monkeypatch):
    jobs = """\
  gpu-training:jobs:
    - &nccl
      name: nccl-a
      kind: nccl-test
      nodeGroup: p4d
      nodes: 1
    - <<: *nccl
      name: nccl-b
"""
    _write(tmp_path, "merge", "config:\n  aws:region: us-west-2\n" + _GROUPS + jobs)
    values = read_stack_config("merge", tmp_path)[1]
    assert [j["name"] for j in values[f"{NS}:jobs"]] == ["nccl-a", "nccl-b"]
    assert values[f"{NS}:jobs"][1] == {"kind": "nccl-test", "name": "nccl-b", "nodeGroup": "p4d", "nodes": 1}
    code, err = _plan(tmp_path, "merge", monkeypatch)
    assert code == 0, err
    _write(tmp_path, "merge", "config:\n  aws:region: us-west-2\n" + _GROUPS + jobs + "      name: nccl-c\n")
    code, err = _plan(tmp_path, "merge", monkeypatch)
    assert code == 2 and f"{NS}:jobs[1].name: the key 'name' is written twice in one map (lines 12 and 13)" in err, err


# ----------------------------------------------------------------------------------------------
# Aliases: the limit of yaml.v3
# ----------------------------------------------------------------------------------------------

# decode_test.go:953-962: nine levels of nine aliases, "document contains excessive aliasing"
ALIAS_BOMB = "".join(
    f"{name}: &{name} [{','.join(['*' + prev] * 9) if prev else ','.join(['00'] * 9)}]\n" for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


def test_allowed_alias_ratio_is_yaml_v3s():
    # decode.go:468-482
    assert allowed_alias_ratio(1_000) == 0.99
    assert allowed_alias_ratio(400_000) == 0.99
    assert allowed_alias_ratio(4_000_000) == 0.10
    assert allowed_alias_ratio(2_200_000) == pytest.approx(0.99 - 0.89 * 0.5)


def test_an_alias_bomb_stops_after_a_few_thousand_values():
    started = time.perf_counter()
    _, found = decode(ALIAS_BOMB.encode())
    assert time.perf_counter() - started < 2.0
    assert len(found) == 1 and "document contains excessive aliasing" in found[0].message
    # nine to the ninth values (387 million) unbounded; refused after a few thousand
    count = int(found[0].message.split(" of the first ")[1].split()[0])
    assert 1000 < count < 20_000


def test_a_stack_file_alias_bomb_is_refused_naming_the_key(tmp_path, monkeypatch):
    _write(tmp_path, "bomb", "config:\n  aws:region: us-west-2\n  gpu-training:tags:\n" + "".join("    " + line + "\n" for line in ALIAS_BOMB.splitlines()))
    code, err = _plan(tmp_path, "bomb", monkeypatch)
    assert code == 2 and f"{NS}:tags: YAML aliases expand to too much" in err and "Traceback" not in err, err


def test_aliases_below_the_limit_are_read():
    # limitTests "10kb of maps" (limit_test.go:37): one big anchor, no alias
    value, found = decode(("a: &a [{a}" + ",{a}" * (10 * 1024 // 4 - 1) + "]").encode())
    assert not found and len(value["a"]) == 10 * 1024 // 4
    # a shared map used a hundred times: 99% of far fewer than 400,000 values
    doc = "d: &d {a: 1, b: 2}\nl: [" + ", ".join(["*d"] * 100) + "]\n"
    value, found = decode(doc.encode())
    assert not found and value["l"][99] == {"a": 1, "b": 2}


# ----------------------------------------------------------------------------------------------
# Messages: bounded work, look-alike characters named
# ----------------------------------------------------------------------------------------------


def test_fmt_shows_small_values_as_before():
    for value in (None, True, 3, 1.5, [1, "a"], {"k": "Ünï", "n": [None, float("inf")]}, {}, []):
        assert fmt(value) == json.dumps(value, default=str)
    assert fmt("x" * 100) == repr("x" * 100)[:77] + "..."
    assert fmt("a'" * 100) == repr("a'" * 100)[:77] + "..."  # the quote repr() picks for the whole string
    assert fmt({"k": "v" * 200}) == json.dumps({"k": "v" * 200})[:77] + "..."


def test_fmt_work_is_bounded_by_the_message():
    cyclic: dict = {}
    cyclic["a"] = cyclic
    deep: object = 1
    for _ in range(100_000):
        deep = {"a": deep}
    shared = ["x" * 10] * 10
    for _ in range(60):  # 10**60 strings if expanded
        shared = [shared] * 10
    started = time.perf_counter()
    for value in (cyclic, deep, shared, list(range(10**6)), 10**5000):
        text = fmt(value)
        assert len(text) <= 80, text
    assert time.perf_counter() - started < 1.0
    assert fmt(cyclic).startswith('{"a": {"a": ')


def test_a_deep_value_from_the_engine_is_refused_naming_its_key():
    deep: object = "x"
    for _ in range(5000):
        deep = {"a": deep}
    flat = {"aws:region": "us-west-2", f"{NS}:tags": _deep_json(5000)}
    values = decode_config_values(flat)  # Python's JSON decoder gives up near 1000 levels
    for given in (values, {**minimal_values(), f"{NS}:tags": deep}):
        with pytest.raises(ConfigError) as err:
            load(given, "gpu-training", "x")
        assert [str(p) for p in err.value.problems] == [
            f"{NS}:tags: nests maps and lists more than {MAX_DEPTH} levels deep; no value of this project's config nests more than a few"
        ]


def test_a_look_alike_character_is_named_with_its_place():
    assert fmt("р4d.24xlarge") == "'р4d.24xlarge' (non-ASCII: U+0440 CYRILLIC SMALL LETTER ER at position 1)"
    assert "U+200B ZERO WIDTH SPACE at position 4" in fmt("p4d\u200b.24xlarge")
    # A value quoted without fmt, a list of names: the problem names what no note names yet.
    line = str(Problem(f"{NS}:jobs[0].nodeGroup", "'p4d' is not a GPU node group of this stack; known groups: 'р4d'"))
    assert line.endswith("(non-ASCII: U+0440 CYRILLIC SMALL LETTER ER at position 1 of 'р4d')")
    assert str(Problem("k", f"{fmt('р4d')} is bad")).count("U+0440") == 1
    assert str(Problem("k", "plain ASCII")) == "k: plain ASCII"


def test_look_alikes_in_values_and_keys_are_named_in_the_plans_messages():
    groups = [{"name": "p4d", "instanceType": "р4d.24xlarge", "mіnSize": 0}]
    with pytest.raises(ConfigError) as err:
        load(minimal_values(gpuNodeGroups=groups), "gpu-training", "x")
    text = str(err.value)
    assert "unknown key 'mіnSize' (non-ASCII: U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I at position 2)" in text
    with pytest.raises(ConfigError) as err:
        load({**minimal_values(), f"{NS}:gpuNоdeGroups": []}, "gpu-training", "x")
    assert "unknown key (non-ASCII: U+043E CYRILLIC SMALL LETTER O at position 5)" in str(err.value)


# ----------------------------------------------------------------------------------------------
# The plan command: no traceback for any of it
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config,expect",
    [
        ("  gpu-training:storage:\n    fsx:\n      backupStartTime: 22:30\n", None),  # text under YAML 1.2: plans
        ("  gpu-training:tags: {team: yes, shift: 22:30}\n", None),
        ("  gpu-training:tags: {cost: 0755}\n", f"{NS}:tags.cost: 493 is not allowed: expected a string (YAML reads an unquoted number"),
        ("  gpu-training:etcd:\n  gpu-training:tags:\n    # team: vision\n", None),  # no value: the CLI passes "", the defaults
        ("  gpu-training:tags: " + "{a: " * 1000 + "b" + "}" * 1000 + "\n", f"{NS}:tags: nests maps and lists more than"),
    ],
)
def test_the_plan_reads_the_stack_file_as_pulumi_does(tmp_path, monkeypatch, config, expect):
    _write(tmp_path, "s", "config:\n  aws:region: us-west-2\n" + _GROUPS + config)
    code, err = _plan(tmp_path, "s", monkeypatch)
    assert "Traceback" not in err
    if expect is None:
        assert code == 0, err
    else:
        assert code == 2 and expect in err, err


# ----------------------------------------------------------------------------------------------

_GROUPS = """\
  gpu-training:gpuNodeGroups:
    - {name: p4d, instanceType: p4d.24xlarge, minSize: 0, desiredSize: 0, maxSize: 2}
"""


def _deep_json(levels: int) -> str:
    return '{"a": ' * levels + '"x"' + "}" * levels


def _write(root: Path, stack: str, text: str | bytes) -> None:
    (root / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    path = root / f"Pulumi.{stack}.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def _plan(root: Path, stack: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setattr(plan_mod, "PROJECT_ROOT", root)
    out, err = io.StringIO(), io.StringIO()
    code = plan_mod.run_cli(stack, None, stdout=out, stderr=err)
    return code, err.getvalue()
