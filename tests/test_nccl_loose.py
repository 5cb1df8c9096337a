"""labkit.nccl.loose: the safety net that reads watched names paired with a value in loose forms
(mid-sentence, a table cell, ``NAME: VALUE``, ``set NAME to VALUE``), checked at most as
warnings and kept out of the parsed environment."""

from __future__ import annotations

import pytest

from labkit.nccl import check_env, render_exports
from labkit.nccl.loose import FORMS, loose_pairs
from labkit.nccl.paste import parse_env


def checked(text: str):
    parsed = parse_env(text)
    return parsed, check_env(parsed.env, **parsed.job)


def pairs(text: str) -> dict[str, str]:
    return {p.name: p.value for p in parse_env(text).loose}


@pytest.mark.parametrize("text,name,value,form", [
    ("the page sets os.environ['NCCL_TIMEOUT']='1800' in seconds, and more", "NCCL_TIMEOUT",
     "1800", "subscript"),
    ("we tried NCCL_SOCKET_IFNAME='eth0' first", "NCCL_SOCKET_IFNAME", "eth0", "assign"),
    ("we tried `NCCL_IB_HCA=mlx5_0`. It helped", "NCCL_IB_HCA", "mlx5_0", "assign"),
    ("  NCCL_IB_TIMEOUT = 22", "NCCL_IB_TIMEOUT", "22", "assign"),
    ("NCCL_DEBUG: WARN  # why", "NCCL_DEBUG", "WARN", "colon"),
    ("| `NCCL_PROTO` | `LL128` | why |", "NCCL_PROTO", "LL128", "table"),
    ("then set `NCCL_DEBUG` to `WARN` again", "NCCL_DEBUG", "WARN", "set"),
    ("so NCCL_NET_GDR_LEVEL is set to PHB there", "NCCL_NET_GDR_LEVEL", "PHB", "set-to"),
])
def test_each_loose_form_yields_its_pair(text, name, value, form):
    found = [p for p in loose_pairs(text, ()) if p.name == name]
    assert [(p.value, p.shape) for p in found] == [(value, FORMS[form])], found


@pytest.mark.parametrize("text,value", [
    ('Setting `os.environ["NCCL_BLOCKING_WAIT"] = "1"` to enable the timeout logic', "1"),
    ("`os.environ['NCCL_BLOCKING_WAIT']='1'`", "1"),  # a line that is one code span
    ('- `env["NCCL_BLOCKING_WAIT"] = "1"`.', "1"),
    ('Try ``os.environ["NCCL_BLOCKING_WAIT"] = "1"``, then rerun', "1"),
    ("Setting `os.environ['NCCL_BLOCKING_WAIT'] = 1` works", "1"),  # a number
])
def test_a_python_assignment_in_a_code_span_is_read_loosely(text, value):
    parsed, findings = checked(text)
    assert parsed.env == {} and parsed.named == ["NCCL_BLOCKING_WAIT"]  # no value structurally
    assert [(p.name, p.value, p.shape) for p in parsed.loose] == [
        ("NCCL_BLOCKING_WAIT", value, FORMS["subscript"])]
    assert [(f.severity, f.variable) for f in findings] == [("warning", "NCCL_BLOCKING_WAIT")]
    assert "read loosely" in findings[0].message and "TORCH_NCCL_BLOCKING_WAIT" in \
        findings[0].message


def test_a_wrong_value_in_a_code_span_is_a_warning_not_an_error():
    parsed, findings = checked('We set `os.environ["NCCL_DEBUG"] = "WARNING"` for the run.')
    debug = [f for f in findings if f.variable == "NCCL_DEBUG"]
    assert [f.severity for f in debug] == ["warning"]
    assert "as a setting it is an error" in debug[0].message


def test_table_rows_take_the_value_column_their_header_names():
    text = ("| Variable | Description | Default |\n|---|---|---|\n"
            "| NCCL_PROTO | protocols to use | `LL,LL128,Simple` |\n| NCCL_ALGO | Tree or Ring | |")
    assert [(p.name, p.value, p.shape) for p in loose_pairs(text, ())] == [
        ("NCCL_PROTO", "LL,LL128,Simple", "a table row ('default' column)")]


@pytest.mark.parametrize("text", [
    "# export NCCL_IB_CUDA_SUPPORT=1",  # commented out on purpose
    "# NCCL_DEBUG: ERROR",
    'x = os.environ.get("NCCL_DEBUG", "ERROR")',  # code reading a variable
    'if os.environ["NCCL_DEBUG"] == "ERROR": pass',
    'if "NCCL_DEBUG" in os.environ: level = 1',
    "echo ${NCCL_DEBUG:-ERROR} $NCCL_DEBUG=ERROR",  # shell expansions
    "host:1:2 [0] NCCL INFO NCCL_DEBUG=ERROR was ignored",  # NCCL's own log
    "set NCCL_DEBUG to the right level",  # a word, not a value
    "NCCL_DEBUG: null",  # YAML null
    "with patch(MASTER_ADDR=master_addr,",  # a Python name
    'CHECKS = {"NCCL_DEBUG": level, "NCCL_NTHREADS": _nthreads}',  # dict values that are names
    "it prints NCCL_IB_TIMEOUT=%d there",  # a format
    "NCCL_DEBUG=... and NCCL_IB_HCA=<your-hca>",  # placeholders
    'os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)',  # an expression
    'set `os.environ["NCCL_DEBUG_FILE"] = "/tmp/nccl." + str(rank)` per rank',  # an expression
    "then `os.environ['NCCL_IB_HCA'] = 'mlx5_%d' % i` on each",
    "make MPI=1 NCCL_HOME=/usr/local/nccl",  # make's own variable
    "```diff\n-NCCL_DEBUG=ERROR is what we had\n+we use the default now\n```",  # removed line
])
def test_what_sets_nothing_yields_no_pair(text):
    assert not parse_env(text).loose


def test_a_mangled_nccl_name_in_a_heading_code_span_is_a_loose_typo_warning():
    text = ("# ` - -e CCL_NET_GDR_LEVEL=PHB` Typo in nccl module\n\nI noticed the GDR_LEVEL is "
            "missing an `N`.")
    parsed, findings = checked(text)
    assert parsed.env == {} and [(p.name, p.value, p.line) for p in parsed.loose] == [
        ("CCL_NET_GDR_LEVEL", "PHB", 1)]
    assert [(f.severity, f.variable) for f in findings] == [("warning", "CCL_NET_GDR_LEVEL")]
    assert "read loosely from line 1" in findings[0].message
    assert "did you mean NCCL_NET_GDR_LEVEL?" in findings[0].fix
    assert pairs("we set NCL_DEBUG to INFO there") == {"NCL_DEBUG": "INFO"}


@pytest.mark.parametrize("text", [
    "# export CCL_NET_GDR_LEVEL=PHB",  # a commented-out setting, mangled name or not
    "# NCL_DEBUG=INFO", "# -e NNCL_DEBUG=INFO", "# - -e CCL_NET_GDR_LEVEL=PHB",
    "we run with CCL_WORKER_COUNT=4 and CCL_ATL_TRANSPORT=ofi",  # oneCCL's own
    "on Ascend HCCL_BUFFSIZE=200 and HCCL_SOCKET_IFNAME=eth0 there",  # Huawei HCCL's own
    "we called init(nccl_debug=INFO) there",  # lower case in prose: a keyword argument
    "with NCLX_FOO=1 set",  # a mangled prefix, but no NCCL name's rest
])
def test_commented_or_other_libraries_mangled_names_yield_no_pair(text):
    assert not parse_env(text).loose


def test_log_output_runs_are_not_read_loosely():
    log = ("ProcessGroupNCCL initialized with following options:\nNCCL_ASYNC_ERROR_HANDLING: 1\n"
           "NCCL_DESYNC_DEBUG: 0\nTIMEOUT(ms): 1800000\nUSE_HIGH_PRIORITY_STREAM: 0")
    assert not parse_env(log).loose


def test_a_variable_read_structurally_is_not_looked_at_again():
    text = "export NCCL_DEBUG=WARN\nthe README said NCCL_DEBUG=ERROR once"
    parsed, findings = checked(text)
    assert parsed.env == {"NCCL_DEBUG": "WARN"} and not parsed.loose
    assert not findings


def test_a_variable_only_named_is_looked_at_loosely():
    text = "mpirun -x NCCL_DEBUG ./run\nwe had NCCL_DEBUG=ERROR there"
    parsed = parse_env(text)
    assert parsed.named == ["NCCL_DEBUG"] and pairs(text) == {"NCCL_DEBUG": "ERROR"}


def test_one_pair_per_distinct_value_in_line_order():
    text = "docs: we had NCCL_ALGO=Ring, then NCCL_ALGO=Ring, then\nso NCCL_ALGO=Tree"
    assert [(p.value, p.line) for p in parse_env(text).loose] == [("Ring", 1), ("Tree", 2)]


def test_loose_findings_are_warnings_at_most_and_say_where_and_how():
    text = "docs: we tried NCCL_DEBUG=ERROR and NCCL_DEBG=INFO and NCCL_IB_CUDA_SUPPORT=1 there"
    parsed, findings = checked(text)
    assert parsed.env == {} and {p.name for p in parsed.loose} == {
        "NCCL_DEBUG", "NCCL_DEBG", "NCCL_IB_CUDA_SUPPORT"}
    assert {f.variable for f in findings} == {"NCCL_DEBUG", "NCCL_DEBG", "NCCL_IB_CUDA_SUPPORT"}
    assert all(f.severity == "warning" and f.edit is None for f in findings)
    assert all(f.message.startswith("read loosely from line 1, in the form NAME=VALUE in a line")
               for f in findings)
    debug = next(f for f in findings if f.variable == "NCCL_DEBUG")
    assert "as a setting it is an error" in debug.message and "not a level" in debug.message
    assert "NCCL_DEBUG" in next(f.fix for f in findings if f.variable == "NCCL_DEBG")  # typo hint
    assert "no longer reads it" in next(f.message for f in findings
                                        if f.variable == "NCCL_IB_CUDA_SUPPORT")


def test_good_values_in_prose_give_no_finding():
    text = ("docs: set NCCL_DEBUG to INFO when debugging; we ran with NCCL_ALGO=Ring, "
            "NCCL_IB_DISABLE=0 and TORCH_DISTRIBUTED_DEBUG=DETAIL while looking.")
    parsed, findings = checked(text)
    assert parsed.env == {} and len(parsed.loose) == 4 and findings == []


def test_loose_pairs_stay_out_of_env_and_out_of_fix():
    text = "export NCCL_P2P_LEVEL=5\nwe tried NCCL_DEBUG=ERROR there"
    parsed, findings = checked(text)
    assert parsed.env == {"NCCL_P2P_LEVEL": "5"}
    fixed = render_exports(parsed.env, findings)
    assert "NCCL_DEBUG" not in fixed and "NCCL_P2P_LEVEL=SYS" in fixed
    assert any("read loosely" in line and "NCCL_DEBUG=ERROR (line 2)" in line
               for line in parsed.describe("x.md"))


def test_structural_figures_do_not_see_loose_pairs():
    assert loose_pairs("we tried NCCL_DEBUG=ERROR", {"NCCL_DEBUG"}) == ()
    assert loose_pairs("we tried NCCL_DEBUG=ERROR", ())[0].where() == (
        "line 1, in the form NAME=VALUE in a line: 'NCCL_DEBUG=ERROR'")


@pytest.mark.parametrize("text", [
    "NCCL_" * 20000 + "X=1", "(" * 100000 + "NCCL_X=1", "`" * 100000 + "NCCL_X=1",
    "NCCL_X=" + "a" * 100000 + " x", "x " * 50000 + "NCCL_X set to 1", " " * 100000 + "NCCL_X: 1",
    "make " * 20000 + "NCCL_X=1",
])
@pytest.mark.timeout(120)  # a bound on a hang, not a speed: quadratic scanning takes hours here
def test_long_lines_are_scanned_in_linear_time(text):
    pairs = loose_pairs(text, ())
    assert all(p.name.startswith("NCCL_") for p in pairs)


def test_a_python_pair_of_strings_is_read_loosely_but_not_a_calls_arguments():
    text = ('key, value = "NCCL_ASYNC_ERROR_HANDLING", "1"\nos.environ[key] = value\n'
            'PAIRS = [("NCCL_DEBUG", "INFO")]\nos.environ.get("NCCL_IB_DISABLE", "1")\n'
            'print("NCCL_ALGO", "Ring")\n')
    got = {(p.name, p.value, p.raw) for p in loose_pairs(text, ())}
    assert got == {("NCCL_ASYNC_ERROR_HANDLING", "1", '"NCCL_ASYNC_ERROR_HANDLING", "1"'),
                   ("NCCL_DEBUG", "INFO", '"NCCL_DEBUG", "INFO"')}
