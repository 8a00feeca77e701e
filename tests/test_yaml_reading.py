"""The offline plan reads a stack file as the Pulumi CLI does, and hands the program what `pulumi up`
hands it (stacks/config/yaml_reading.py: ruamel.yaml set to read as the CLI's yaml.v3 does;
stacks/config/stackfile.py: what the CLI does with the file then).

``RULES`` is the table: a config value as written in a stack file, and what the program gets for it
or the refusal, naming the key. The rules of docs/config.md ("How stack files are read") are rows, and so are
the cases of yaml.v3's own tests. Where plain ruamel.yaml reads a row otherwise, the row says what
ruamel reads and ``test_where_plain_ruamel_reads_otherwise`` checks that it still does: those are
the reader's adjustments, each named by the behaviour it follows.

Sources:

- yaml.v3: github.com/go-yaml/yaml at v3.0.1 (f6f7691b1fdeb513f56608cd2c32c51f8194bf51), the
  version pulumi/pulumi's sdk/go.mod requires: resolve.go (the resolver), decode.go (aliases,
  merges, duplicate keys) and decode_test.go (unmarshalTests, unmarshalErrorTests, mergeTests,
  mergeTestsNested, limitTests), cited by line below ("decode_test.go:59");
- the Pulumi CLI: github.com/pulumi/pulumi (1b5949891b3cefcb9974752b24a5ecef0acc86c8)
  sdk/go/common/workspace/loaders.go LoadProjectStackBytes (decode into interface{},
  SimplifyMarshalledProject: text keys only, namespacing, write out and read again),
  sdk/go/common/resource/config/object.go (unmarshalObject: a time.Time becomes its String();
  MarshalString: numbers and booleans as JSON, maps and lists as JSON, strings as they are).

The rows the decode_test.go does not have (quirks of resolve.go's code: 08, 1e400, ...) were checked
against yaml.v3 v3.0.1 built from that source. ``KNOWN_DIFFERENCES`` lists the few spellings where
this reader and yaml.v3 part (no one writes them).
"""

from __future__ import annotations

import datetime
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from ruamel.yaml import YAML
from ruamel.yaml.composer import ComposerError
from ruamel.yaml.constructor import ConstructorError

from facts.problems import ConfigError, Problem, fmt
from infra import plan as plan_mod
from stacks.config import load
from stacks.config.loading import MAX_DEPTH, decode_config_values
from stacks.config.stackfile import StackFileError, engine_config, load_yaml, read_config_value, read_stack_config
from tests.helpers import NS, ROOT, minimal_values


@dataclass(frozen=True)
class Refused:
    """The stack is refused: a problem at ``key`` whose message has ``says``."""

    key: str
    says: str


class Rule(NamedTuple):
    text: str  # a config value as written in a stack file (`project:x: <text>`)
    program_gets: Any  # what the program gets (after decode_config_values), or Refused
    source: str
    ruamel: Any = (
        None  # what plain ruamel.yaml 1.2 reads from `v: <text>` where it differs (a value, a type or an exception)
    )


UNSUPPORTED = "json: unsupported value"  # the CLI writes config values as JSON: no infinity, no NaN
# decode_test.go:953-962: nine levels of nine aliases, "document contains excessive aliasing"
ALIAS_BOMB = "".join(
    f"{name}: &{name} [{','.join(['*' + prev] * 9) if prev else ','.join(['00'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)

RULES = [
    # docs/config.md: `yes`, `no`, `on`, `off` and `22:30` are text, only true/false are booleans ...
    Rule("yes", "yes", "docs/config.md; resolve.go:52-53, the resolveMap (YAML 1.2)"),
    Rule("no", "no", "docs/config.md"),
    Rule("on", "on", "docs/config.md"),
    Rule("off", "off", "docs/config.md"),
    Rule("22:30", "22:30", "docs/config.md; resolve.go:165 (base 60 dropped in YAML 1.2)"),
    Rule("true", "true", "docs/config.md; MarshalString writes a boolean's JSON"),
    Rule("false", "false", "docs/config.md"),
    Rule("True", "true", "decode_test.go:121"),
    Rule("FALSE", "false", "decode_test.go:130"),
    Rule("Yes", "Yes", "resolve.go:52-53"),
    Rule("OFF", "OFF", "resolve.go:52-53"),
    Rule("y", "y", "resolve.go:52-53"),
    Rule("tRUE", "tRUE", "resolve.go:52-53"),
    # ... an unquoted number is a number in any spelling, so quote a value meant as text.
    Rule(
        "0755",
        "493",
        "docs/config.md; resolve.go:192, Go's strconv.ParseInt with base 0 (yaml.v3 keeps YAML 1.1's octal)",
        ruamel=755,
    ),
    Rule("0o755", "493", "docs/config.md; resolve.go:192"),
    Rule("0x1F", "31", "docs/config.md; resolve.go:192"),
    Rule("0X1F", "31", "resolve.go:192: Go takes the prefix in either case", ruamel="0X1F"),
    Rule("1_000", "1000", "docs/config.md; resolve.go:191 (every _ removed first)"),
    Rule("1e3", "1000", "docs/config.md; resolve.go:204, a float, read again as the int 1000"),
    Rule("'0755'", "0755", "docs/config.md: quote a value meant as text"),
    Rule("10", "10", "decode_test.go:56"),
    Rule("0b10", "2", "decode_test.go:59"),
    Rule("0xA", "10", "decode_test.go:62"),
    Rule("4294967296", "4294967296", "decode_test.go:65"),
    Rule("0.1", "0.1", "decode_test.go:68"),
    Rule(".1", "0.1", "decode_test.go:71"),
    Rule("-10", "-10", "decode_test.go:80"),
    Rule("-.1", "-0.1", "decode_test.go:83"),
    Rule("6.8523e+5", "685230", "decode_test.go:95"),
    Rule("685.230_15e+03", "685230.15", "decode_test.go:98 (underscores removed)"),
    Rule("685_230.15", "685230.15", "decode_test.go:101"),
    Rule("+685_230", "685230", "decode_test.go:155"),
    Rule("02472256", "685230", "decode_test.go:158 (1.1 octal kept for compatibility, resolve.go:234)", ruamel=2472256),
    Rule("-02472256", "-685230", "decode_test.go:161", ruamel=-2472256),
    Rule("0o2472256", "685230", "decode_test.go:164"),
    Rule("-0o2472256", "-685230", "decode_test.go:167"),
    Rule("0x_0A_74_AE", "685230", "decode_test.go:170"),
    Rule("0b1010_0111_0100_1010_1110", "685230", "decode_test.go:173"),
    Rule("-0b101010", "-42", "decode_test.go:176"),
    Rule("-0b1" + "0" * 63, str(-(2**63)), "decode_test.go:179"),
    Rule("1__0_", "10", "resolve.go:191"),
    Rule("08", "8", "resolve.go:204 (not octal: yamlStyleFloat, so a float, 8 again in JSON)"),
    Rule("09.5", "9.5", "resolve.go:204"),
    Rule("18446744073709551615", "18446744073709551615", "resolve.go:200 (ParseUint)"),
    Rule("1e400", "1e400", "resolve.go:205: beyond Go's floats ParseFloat fails, so text", ruamel=math.inf),
    Rule(".5_5", "0.55", "resolve.go:175 (Go's ParseFloat takes _ between digits)"),
    Rule("1.50", "1.5", "MarshalString: Go's JSON of the float"),
    Rule("-0.0", "0", "written out and read again: the int 0"),
    Rule("1e21", "1e+21", "Go's JSON of a float from 1e21 up"),
    Rule("-b_c", "-b_c", "decode_test.go:591"),
    Rule("+b_c", "+b_c", "decode_test.go:595"),
    Rule("50cent_of_dollar", "50cent_of_dollar", "decode_test.go:599"),
    Rule("1:1", "1:1", "decode_test.go:629 (base 60 is unsupported)"),
    Rule("190:20:30.15", "190:20:30.15", "resolve.go:165"),
    Rule("0x", "0x", "resolve.go:264"),
    Rule("p4d.24xlarge", "p4d.24xlarge", "resolve.go:264"),
    # Nothing: "" (the CLI warns "No value for configuration key"); a key without a value means the section's defaults.
    Rule("", "", "docs/config.md; decode_test.go:190"),
    Rule("~", "", "decode_test.go:193"),
    Rule("null", "", "decode_test.go:196"),
    Rule("''", "", "a quoted empty text"),
    Rule("nULL", "nULL", "resolve.go:54, the resolveMap"),
    # Merge keys work; `<<` is one only where a key is.
    Rule("{<<: {a: 1, b: 1}, b: 2}", {"a": 1, "b": 2}, "docs/config.md; decode.go merge: keys written in the map win"),
    Rule("<<", "<<", "resolve.go:59; decode.go isMerge: a merge key only where a key is", ruamel=ConstructorError),
    Rule("'<<'", "<<", "quoted: text"),
    Rule(
        "{'<<': {a: 1, b: 1}, b: 2}",
        {"a": 1, "b": 2},
        "yaml.v3 writes the text key '<<' back unquoted: the CLI's second read merges it",
    ),
    Rule("{'<<': 1}", Refused("project:x.<<", "the key '<<' is a merge key"), "... and refuses it then"),
    Rule(
        "{<<: 1}", Refused("project:x", "map merge requires map or sequence of maps"), "decode.go merge (failWantMap)"
    ),
    Rule("{<<: [[a]]}", Refused("project:x", "map merge requires map or sequence of maps"), "decode.go merge"),
    Rule(
        "{<<: {a: 1}, a: 2, a: 3}",
        Refused("project:x.a", "the key 'a' is written twice in one map"),
        "decode.go d.uniqueKeys",
        ruamel={"a": 3},
    ),
    # A key written twice in one map, an alias inside its own anchor, more aliasing than the CLI allows,
    # a map key that is not text, and .inf/.nan are refused naming the key.
    Rule(
        "{a: 1, a: 2}",
        Refused("project:x.a", "the key 'a' is written twice in one map (lines 2 and 2); keep one"),
        "docs/config.md; decode.go d.uniqueKeys",
    ),
    Rule(
        "{a: 1, 'a': 2}", Refused("project:x.a", "written twice"), "decode.go: keys compared as written, not as values"
    ),
    Rule(
        "&x {a: *x}",
        Refused("project:x.a", "the alias *x (line 2) is inside its own anchor &x"),
        "docs/config.md; decode.go d.alias",
        ruamel=dict,
    ),
    Rule("&x [*x]", Refused("project:x[0]", "anchor 'x' value contains itself"), "decode.go d.alias", ruamel=list),
    Rule(
        "{a: *nowhere}",
        Refused("project:x.a", "the alias *nowhere (line 2) has no anchor &nowhere before it"),
        "decode.go parser.alias: unknown anchor",
    ),
    Rule(
        ALIAS_BOMB,
        Refused("project:x", "document contains excessive aliasing"),
        "docs/config.md; decode_test.go:953, decode.go allowedAliasRatio",
        ruamel=dict,
    ),
    Rule(
        "{1: a}",
        Refused("project:x.1", "is a number in YAML, and Pulumi takes only text keys"),
        "docs/config.md; loaders.go SimplifyMarshalledProject",
        ruamel=dict,
    ),
    Rule("{~: a}", Refused("project:x.~", "is null in YAML"), "loaders.go SimplifyMarshalledProject", ruamel=dict),
    Rule(
        "{true: a}",
        Refused("project:x.true", "is a boolean in YAML"),
        "loaders.go SimplifyMarshalledProject",
        ruamel=dict,
    ),
    Rule(
        "{2024-01-01: a}",
        Refused("project:x.2024-01-01", "is a timestamp in YAML"),
        "loaders.go SimplifyMarshalledProject",
        ruamel=dict,
    ),
    Rule(
        ".inf", Refused("project:x", UNSUPPORTED), "docs/config.md; resolve.go:57, then json.Marshal", ruamel=math.inf
    ),
    Rule(".Inf", Refused("project:x", "infinity"), "decode_test.go:74"),
    Rule("-.Inf", Refused("project:x", UNSUPPORTED), "decode_test.go:77"),
    Rule("+.INF", Refused("project:x", UNSUPPORTED), "resolve.go:58"),
    Rule(".nan", Refused("project:x", "not a number (NaN)"), "resolve.go:56"),
    Rule("[-.Inf]", Refused("project:x[0]", UNSUPPORTED), "json.Marshal"),
    Rule("{a: .nan}", Refused("project:x.a", UNSUPPORTED), "json.Marshal"),
    Rule(
        "{a: " * 40 + "b" + "}" * 40,
        Refused("project:x", f"nests maps and lists more than {MAX_DEPTH} levels deep"),
        "this project's config",
    ),
    # Timestamps: time.Time, then its String() (object.go); the machine's zone is taken to be UTC.
    Rule(
        "2024-05-01", "2024-05-01 00:00:00 +0000 UTC", "decode_test.go:732; object.go", ruamel=datetime.date(2024, 5, 1)
    ),
    Rule("2015-02-24T18:19:39.12Z", "2015-02-24 18:19:39.12 +0000 UTC", "decode_test.go:675", ruamel=datetime.datetime),
    Rule(
        "2015-2-3T3:4:5Z",
        "2015-02-03 03:04:05 +0000 UTC",
        "decode_test.go:680: Go's layout takes 1-digit fields",
        ruamel="2015-2-3T3:4:5Z",
    ),
    Rule("2015-02-24t18:19:39Z", "2015-02-24 18:19:39 +0000 UTC", "decode_test.go:685"),
    Rule("2015-02-24 18:19:39", "2015-02-24 18:19:39 +0000 UTC", "decode_test.go:690"),
    Rule(
        "2001-12-14T21:59:43.10-05:00",
        "2001-12-14 21:59:43.1 -0500 -0500",
        "time.Time String(): a fixed zone without a name",
    ),
    Rule("2016-02-29", "2016-02-29 00:00:00 +0000 UTC", "a leap day"),
    Rule("2015-02-30", "2015-02-30", "time.Parse fails (day out of range), so text", ruamel=ValueError),
    Rule(
        "2015-01-01T00:00:00+25:00",
        "2015-01-01T00:00:00+25:00",
        "time.Parse fails (zone hour out of range), so text",
        ruamel=ValueError,
    ),
    Rule("!!str 2015-01-01", "2015-01-01", "decode_test.go:707"),
    Rule('"2015-01-01"', "2015-01-01", "decode_test.go:722"),
    Rule('!!timestamp "2015-01-01"', "2015-01-01 00:00:00 +0000 UTC", "decode_test.go:727"),
    # Tags.
    Rule("! test", "test", "decode_test.go:479 (non-specific tag)"),
    Rule("!!float 0", "0", "decode_test.go:464"),
    Rule("!!null ''", "", "decode_test.go:470"),
    Rule("!!float '1.1'", "1.1", "decode_test.go:461"),
    Rule("!!float 'error'", Refused("project:x", "cannot decode `error` as a !!float"), "decode_test.go:936"),
    Rule(
        "!!binary gIGC",
        "\ufffd" * 3,
        "decode_test.go:635: the bytes 80 81 82, each U+FFFD in Go's JSON",
        ruamel=b"\x80\x81\x82",
    ),
    Rule("!!binary aGVsbG8=", "hello", "decode.go: !!binary into interface{} is a string"),
    Rule("!!binary ==", Refused("project:x", "cannot decode `==` as a !!binary"), "decode_test.go:943"),
    Rule(
        "!unknown text",
        "text",
        "resolve.go: a tag yaml.v3 does not know is kept, the value read as it is",
        ruamel=ConstructorError,
    ),
    # Maps and lists: their JSON (object.go), read back by decode_config_values.
    Rule(
        "[1.0, 2.5, 0x10, 1e21, 08]",
        [1, 2.5, 16, 1e21, 8],
        "MarshalString: JSON; floats without a point read back as ints",
    ),
    Rule(
        "{b: 1, a: {d: 2024-05-01, c: yes}}",
        {"a": {"c": "yes", "d": "2024-05-01 00:00:00 +0000 UTC"}, "b": 1},
        "object.go unmarshalObject",
    ),
    Rule("{secure: v1:AAAA}", "[secret]", "the offline plan cannot decrypt"),
    Rule("{a: {secure: v1:AAAA}}", {"a": "[secret]"}, "object.go isSecureValue"),
    Rule("{secure: 1}", {"secure": 1}, "not a secret: isSecureValue wants text"),
    Rule("'[1, 2]'", [1, 2], "text that is JSON: decode_config_values reads it as the program does"),
]

# Spellings where this reader and yaml.v3 part: (the value, what the program gets here, what yaml.v3 gives it)
KNOWN_DIFFERENCES = [
    ("0b-101", "0b-101", "-5 (resolve.go:210, its 0b fallback parses the rest, sign and all)"),
    ("0o-7", "0o-7", "-7 (the same fallback for 0o)"),
    ("._5", "0.5", "'._5' (Go's ParseFloat wants a digit before _)"),
    (".5e3", ".5e3", "500 (an exponent without a sign after a leading point)"),
    ("1e_3", "1e_3", "1000 (every _ removed, also in the exponent)"),
    ("18446744073709551616", "18446744073709551616", "18446744073709552000 (beyond 64 bits: a float)"),
]


def _program_gets(text: str) -> Any:
    try:
        return read_config_value(text)
    except (ConfigError, StackFileError) as err:
        return err


@pytest.mark.parametrize("rule", RULES, ids=[f"{i}:{rule.text[:30]}" for i, rule in enumerate(RULES)])
def test_rules(rule: Rule):
    got = _program_gets(rule.text)
    if isinstance(rule.program_gets, Refused):
        problems = got.problems if isinstance(got, ConfigError) else []
        assert any(p.key == rule.program_gets.key and rule.program_gets.says in p.message for p in problems), (
            rule,
            got,
        )
    else:
        assert got == rule.program_gets and type(got) is type(rule.program_gets), (rule, got)


@pytest.mark.parametrize("rule", [r for r in RULES if r.ruamel is not None], ids=lambda r: r.text[:30])
def test_where_plain_ruamel_reads_otherwise(rule: Rule):
    """Each adjustment is still needed: ruamel.yaml 1.2 on its own reads the row otherwise."""
    lines = rule.text.split("\n")
    document = f"v: {rule.text}\n" if len(lines) == 1 else "v:\n" + "".join(f"  {line}\n" for line in lines if line)
    plain = YAML(typ="safe", pure=True)
    if isinstance(rule.ruamel, type) and issubclass(rule.ruamel, Exception):
        with pytest.raises(rule.ruamel):
            plain.load(document)
        return
    value = plain.load(document)["v"]
    if isinstance(rule.ruamel, type):
        assert isinstance(value, rule.ruamel), value
    else:
        assert type(value) is type(rule.ruamel) and value == rule.ruamel, value


@pytest.mark.parametrize("text,program_gets,yaml_v3", KNOWN_DIFFERENCES, ids=[row[0] for row in KNOWN_DIFFERENCES])
def test_known_differences_from_yaml_v3(text, program_gets, yaml_v3):
    assert read_config_value(text) == program_gets, yaml_v3


def test_the_file_is_read_as_the_cli_reads_it(tmp_path):
    # a UTF-8 byte order mark (loaders.go readFileStripUTF8BOM), and only the first document (yaml.v3 Unmarshal)
    _write(tmp_path, "odd", b"\xef\xbb\xbfconfig:\n  aws:region: us-west-2\n---\nconfig: {aws:region: eu-west-1}\n")
    assert read_stack_config("odd", tmp_path)[1] == {"aws:region": "us-west-2"}
    with pytest.raises(ComposerError):  # ruamel.yaml's load wants one document
        YAML(typ="safe", pure=True).load("a: 1\n---\na: 2\n")
    _write(tmp_path, "empty", "")
    assert read_stack_config("empty", tmp_path)[1] == {}


def test_a_yaml_directive_changes_nothing(tmp_path):
    # yaml.v3 reads every file with its own rules; ruamel.yaml would switch to YAML 1.1 (yes: true, 1:20: 80).
    _write(
        tmp_path,
        "v11",
        "%YAML 1.1\n---\nconfig:\n  aws:region: us-west-2\n  gpu-training:tags: {a: yes, b: 0755, c: 1:20}\n",
    )
    assert read_stack_config("v11", tmp_path)[1][f"{NS}:tags"] == {"a": "yes", "b": 493, "c": "1:20"}
    assert YAML(typ="safe", pure=True).load("%YAML 1.1\n---\n{a: yes, c: 1:20}\n") == {"a": True, "c": 80}


def test_map_keys_reach_the_program_sorted():
    assert list(read_config_value("{z: 1, a: 2, m: {y: 1, b: 2}}")) == ["a", "m", "z"]


def test_the_engine_wire_form_is_text(tmp_path):
    _write(
        tmp_path,
        "dev",
        "config:\n  aws:region: us-west-2\n  gpuAvailabilityZone: 0755\n  gpu-training:config:tags: {b: x, a: y}\n",
    )
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
# Stack files: the CLI's keys, and files that are not stack files
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config,key,expect",
    [
        ("  etcd: {replicas: 1}\n  gpu-training:etcd: {replicas: 3}\n", f"{NS}:etcd", "is set twice"),
        ("  gpu-training:a:b: 1\n", "gpu-training:a:b", "is not a config key"),
        (
            "  gpu-training:etcd:\n    cpu: '1'\n    cpu: '2'\n",
            f"{NS}:etcd.cpu",
            "written twice in one map (lines 4 and 5)",
        ),
        ("  gpu-training:tags:\n    1: a\n", f"{NS}:tags.1", "Pulumi takes only text keys"),
        ("  gpu-training:tags: &x\n    a: *x\n", f"{NS}:tags.a", "inside its own anchor &x"),
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


# ----------------------------------------------------------------------------------------------
# Merge keys and aliases, as yaml.v3's own tests have them
# ----------------------------------------------------------------------------------------------

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
    doc = load_yaml(MERGE_TESTS["mergeTests"])
    want = {"x": 1, "y": 2, "r": 10, "label": "center/big"}  # TestMerge, decode_test.go:1394
    for name, value in doc.items():
        if name != "anchors":
            assert value == want, name
    nested = load_yaml(MERGE_TESTS["mergeTestsNested"])["outer"]
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


def test_an_alias_bomb_stops_after_a_few_thousand_values():
    started = time.perf_counter()
    with pytest.raises(StackFileError, match="document contains excessive aliasing") as err:
        load_yaml(ALIAS_BOMB)
    assert time.perf_counter() - started < 2.0
    # nine to the ninth values (387 million) unbounded; refused after a few thousand
    count = int(str(err.value).split(" of the first ")[1].split()[0])
    assert 1000 < count < 20_000


def test_a_stack_file_alias_bomb_is_refused_naming_the_key(tmp_path, monkeypatch):
    _write(
        tmp_path,
        "bomb",
        "config:\n  aws:region: us-west-2\n  gpu-training:tags:\n"
        + "".join("    " + line + "\n" for line in ALIAS_BOMB.splitlines()),
    )
    code, err = _plan(tmp_path, "bomb", monkeypatch)
    assert code == 2 and f"{NS}:tags: YAML aliases expand to too much" in err and "Traceback" not in err, err


def test_aliases_below_the_limit_are_read():
    # limitTests "10kb of maps" (limit_test.go:37): one big anchor, no alias
    value = load_yaml("a: &a [{a}" + ",{a}" * (10 * 1024 // 4 - 1) + "]")
    assert len(value["a"]) == 10 * 1024 // 4
    # a shared map used a hundred times: 99% of far fewer than 400,000 values
    value = load_yaml("d: &d {a: 1, b: 2}\nl: [" + ", ".join(["*d"] * 100) + "]\n")
    assert value["l"][99] == {"a": 1, "b": 2}


def test_aliases_cannot_nest_deeper_than_the_files_own_levels():
    # each anchor holds the one before: 60 levels through aliases, in a file 2 levels deep
    text = "a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 60))
    with pytest.raises(StackFileError, match=f"nests maps and lists more than {2 + MAX_DEPTH} levels deep"):
        load_yaml(text)


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
            f"{NS}:tags: nests maps and lists more than {MAX_DEPTH} levels deep; no value of this project's config "
            "nests more than a few"
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
    assert (
        "unknown key 'mіnSize' (non-ASCII: U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I at position 2)" in text
    )
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
        (
            "  gpu-training:tags: {cost: 0755}\n",
            f"{NS}:tags.cost: 493 is not allowed: expected a string (YAML reads an unquoted number",
        ),
        (
            "  gpu-training:etcd:\n  gpu-training:tags:\n    # team: vision\n",
            None,
        ),  # no value: the CLI passes "", the defaults
        (
            "  gpu-training:tags: " + "{a: " * 1000 + "b" + "}" * 1000 + "\n",
            f"{NS}:tags: nests maps and lists more than",
        ),
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
