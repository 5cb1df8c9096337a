"""labkit.nccl.paste: every shape in which people paste env settings, and files it refuses."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import ParameterError
from labkit.nccl.cli import add_arguments, run
from labkit.nccl.envfile import parse_env_file, render_exports
from labkit.nccl.envsource import MAX_ENV_BYTES, read_env_source
from labkit.nccl.findings import Edit, Finding
from labkit.nccl.paste import ParsedEnv, parse_env


def shapes(parsed: ParsedEnv) -> dict[str, str]:
    return {a.name: a.shape for a in parsed.assignments}


# --- launchers --------------------------------------------------------------------------------

def test_mpirun_x_sets_and_names_and_leaves_the_program_options_alone():
    parsed = parse_env(
        "mpirun --allow-run-as-root -np 16 -H node1:8,node2:8 --bind-to none "
        "-x NCCL_DEBUG=INFO -x NCCL_SOCKET_IFNAME=eth0 -x LD_LIBRARY_PATH -mca pml ob1 "
        "./build/all_reduce_perf -b 8 -e 8G -f 2 -g 1")
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"}
    assert parsed.named == ["LD_LIBRARY_PATH"]
    assert parsed.count == 3
    assert set(shapes(parsed).values()) == {"mpirun -x"}
    assert not parsed.unparsed
    assert "named, value not given (not checked): LD_LIBRARY_PATH" in parsed.describe("x.sh")


def test_mpirun_over_continued_lines_behind_a_prompt():
    text = ("[root@gpu1 nccl-tests]# mpirun -np 16 -hostfile hosts \\\n"
            "    -x NCCL_IB_HCA=mlx5_0,mlx5_1 \\\n"
            "    -x NCCL_NET_GDR_LEVEL=PIX \\\n"
            "    -genv NCCL_ALGO Ring \\\n"
            "    ./build/all_reduce_perf -b 8 -e 8G\n"
            "export NCCL_DEBUG=WARN\n")
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_NET_GDR_LEVEL": "PIX",
                          "NCCL_ALGO": "Ring", "NCCL_DEBUG": "WARN"}
    assert [a.line for a in parsed.assignments] == [1, 1, 1, 6]
    assert parsed.assignments[0].raw.startswith("[root@gpu1 nccl-tests]# mpirun")


def test_docker_run_env_flags_and_the_script_it_runs():
    parsed = parse_env(
        "docker run --rm --gpus all --ipc=host --network=host -e NCCL_DEBUG=INFO "
        "--env NCCL_SOCKET_IFNAME=eth0 --env=NCCL_IB_DISABLE=1 -e 'NCCL_IB_HCA=mlx5_0:1' "
        "-e HOSTNAME --env-file ./env.list -v /data:/data nvcr.io/nvidia/pytorch:24.05-py3 "
        "bash -c \"export NCCL_P2P_LEVEL=NVL && torchrun --nproc_per_node=8 train.py\"")
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0",
                          "NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": "mlx5_0:1",
                          "NCCL_P2P_LEVEL": "NVL"}
    assert parsed.named == ["HOSTNAME"]
    assert shapes(parsed)["NCCL_IB_DISABLE"] == "docker -e"
    assert shapes(parsed)["NCCL_P2P_LEVEL"] == "export"


def test_srun_export_list_and_sbatch_directives():
    text = "\n".join([
        "#!/bin/bash",
        "#SBATCH --nodes=2 --gpus-per-node=8",
        "#SBATCH --export=ALL,NCCL_DEBUG=WARN",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "srun --export=ALL,NCCL_SOCKET_IFNAME=hsn0,FI_PROVIDER=cxi,TORCH_NCCL_BLOCKING_WAIT "
        "python train.py",
        "srun --export ALL,NCCL_IB_HCA=mlx5_0,mlx5_1 ./all_reduce_perf",
    ])
    parsed = parse_env(text)
    assert parsed.env == {
        "NCCL_DEBUG": "WARN",
        "MASTER_ADDR": '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "NCCL_SOCKET_IFNAME": "hsn0", "FI_PROVIDER": "cxi", "NCCL_IB_HCA": "mlx5_0"}
    assert parsed.named == ["TORCH_NCCL_BLOCKING_WAIT"]
    assert shapes(parsed)["FI_PROVIDER"] == "srun --export"
    (line, note), = parsed.notes  # Slurm cuts NCCL_IB_HCA at the comma
    assert line == 6 and "'mlx5_1'" in note and "--export=ALL,NAME" in note


def test_env_prefix_declare_readonly_unset_and_setenv():
    text = "\n".join([
        "env NCCL_DEBUG=INFO TORCH_NCCL_ASYNC_ERROR_HANDLING=1 torchrun --nnodes=2 train.py",
        "CUDA_VISIBLE_DEVICES=0,1 NCCL_P2P_DISABLE=1 python -m torch.distributed.run x.py",
        'declare -x NCCL_IB_TIMEOUT="22"', "readonly GLOO_SOCKET_IFNAME=eth0",
        "sudo -E NCCL_ALGO=Tree ./all_gather_perf", "unset NCCL_DEBUG", "setenv NCCL_PROTO Simple",
    ])
    parsed = parse_env(text)
    assert parsed.env == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "CUDA_VISIBLE_DEVICES": "0,1",
                          "NCCL_P2P_DISABLE": "1", "NCCL_IB_TIMEOUT": "22",
                          "GLOO_SOCKET_IFNAME": "eth0", "NCCL_ALGO": "Tree",
                          "NCCL_PROTO": "Simple"}
    assert [a.shape for a in parsed.assignments] == [
        "env", "env", "prefix", "prefix", "declare -x", "declare", "sudo", "unset", "setenv"]


def test_option_lines_whose_command_line_was_not_pasted():
    text = ("    -x NCCL_IB_HCA=ibp \\\n    -x NCCL_PROTO=^LL128 \\\n"
            "    /opt/nccl_tests/build/all_reduce_perf -b 512M -e 8G -f 2 -g 1\n"
            "    -e NCCL_SOCKET_IFNAME='bond0' \\\n    --env NCCL_NET=Socket \\\n")
    assert parse_env(text).env == {"NCCL_IB_HCA": "ibp", "NCCL_PROTO": "^LL128",
                                   "NCCL_SOCKET_IFNAME": "bond0", "NCCL_NET": "Socket"}


def test_semicolons_and_several_assignments_per_export():
    parsed = parse_env("export A=1 B=2; export C=3 && D=4 || E=5 | cat; (export F=6)")
    assert parsed.env == {"A": "1", "B": "2", "C": "3", "D": "4", "E": "5", "F": "6"}


# --- YAML -------------------------------------------------------------------------------------

def test_kubernetes_pod_spec_env_list():
    text = """apiVersion: v1
kind: Pod
spec:
  containers:
  - name: trainer
    image: nvcr.io/nvidia/pytorch:24.05-py3
    env:
    - name: NCCL_DEBUG
      value: "INFO"
    - name: NCCL_SOCKET_IFNAME
      value: eth0   # the pod network
    - name: NCCL_IB_DISABLE
      value: '1'
    - name: MASTER_ADDR
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - {name: NCCL_ALGO, value: Ring}
    resources:
      limits:
        nvidia.com/gpu: 8
"""
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0",
                          "NCCL_IB_DISABLE": "1", "NCCL_ALGO": "Ring"}
    assert parsed.named == ["MASTER_ADDR"]  # valueFrom: the value is not in the paste
    assert {a.line for a in parsed.assignments} == {8, 10, 12, 14, 18}
    assert set(shapes(parsed).values()) == {"yaml env"}
    assert not parsed.unparsed


def test_env_items_pasted_without_their_key():
    parsed = parse_env("- name: NCCL_DEBUG\n  value: INFO\n- name: NCCL_NET\n  value: Socket\n")
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_NET": "Socket"}


def test_compose_environment_lists_and_maps():
    text = """services:
  trainer:
    image: trainer:latest
    environment:
      - NCCL_DEBUG=INFO
      - "NCCL_IB_DISABLE=1"
      - HOME
    volumes:
      - ./data:/data
  worker:
    environment:
      NCCL_P2P_LEVEL: NVL
      NCCL_SOCKET_IFNAME:
      TORCH_NCCL_TRACE_BUFFER_SIZE: 2000
    env_file: .env
"""
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "NVL",
                          "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}
    assert parsed.named == ["HOME", "NCCL_SOCKET_IFNAME"]


def test_inline_yaml_env_and_top_level_keys():
    parsed = parse_env('env: {NCCL_DEBUG: INFO, NCCL_ALGO: "Ring"}\n'
                       "environment: [NCCL_PROTO=Simple, 'NCCL_MIN_NCHANNELS=4']\n"
                       "NCCL_IB_TIMEOUT: 22\n")
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple",
                          "NCCL_MIN_NCHANNELS": "4", "NCCL_IB_TIMEOUT": "22"}


def test_log_output_in_key_value_form_is_not_an_env_map():
    """PyTorch's ProcessGroupNCCL logs its options as 'KEY: value': one per line in older
    releases, comma-separated in recent ones. Next to a key no variable has (TIMEOUT(ms)) or one
    it logs but nobody reads (USE_HIGH_PRIORITY_STREAM), such lines are output."""
    old_log = ("```\nNCCL_ASYNC_ERROR_HANDLING: 0\nNCCL_BLOCKING_WAIT: 0\nTIMEOUT(ms): 1800000\n"
               "USE_HIGH_PRIORITY_STREAM: 0\nNCCL_DEBUG: N/A\n```\n")
    parsed = parse_env(old_log)
    assert parsed.env == {} and not parsed.unparsed
    assert [n for n, note in parsed.notes if "log output" in note and "TIMEOUT(ms)" in note] == [2]
    one_line = "NCCL_ASYNC_ERROR_HANDLING: 1, NCCL_DESYNC_DEBUG: 0, TIMEOUT(ms): 600000\n"
    assert parse_env(one_line).env == {}
    unit_less = "NCCL_DEBUG: UNSET\nUSE_HIGH_PRIORITY_STREAM: 0\n"
    assert parse_env(unit_less).env == {}
    # a map of settings beside it, after a blank line, is still read; so is a plain one
    assert parse_env("NCCL_DEBUG: INFO\nNCCL_IB_TIMEOUT: 22\n\n" + old_log).env == {
        "NCCL_DEBUG": "INFO", "NCCL_IB_TIMEOUT": "22"}
    assert parse_env("NCCL_DEBUG: INFO\nMASTER_PORT: 29500\nnvidia_visible: all\n").env == {
        "NCCL_DEBUG": "INFO", "MASTER_PORT": "29500"}


def test_render_keeps_a_computed_value_and_an_expanding_tilde_as_the_shell_had_them():
    env = {"MASTER_ADDR": "`hostname`", "NCCL_TOPO_FILE": "~/topo dir/t.xml",
           "NCCL_DEBUG_FILE": "~/nccl.%h.log"}
    block = render_exports(env, [], tilde={"NCCL_TOPO_FILE"})
    assert 'export MASTER_ADDR="`hostname`"' in block
    assert "export NCCL_TOPO_FILE=~/'topo dir/t.xml'" in block
    assert "export NCCL_DEBUG_FILE='~/nccl.%h.log'" in block  # it kept its '~': still does
    assert parse_env(block).env == env and parse_env(block).tilde == {"NCCL_TOPO_FILE"}


# --- files as pasted --------------------------------------------------------------------------

def test_dotenv_file():
    text = "\n".join([
        "# .env for the trainer", "NCCL_DEBUG=INFO", 'NCCL_DEBUG_FILE="/tmp/nccl.%h.%p"',
        "NCCL_SOCKET_IFNAME='eth0'  # the fabric", "NCCL_TOPO_FILE=", "export NCCL_IB_GID_INDEX=3",
    ])
    assert parse_env_file(text) == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p",
                                    "NCCL_SOCKET_IFNAME": "eth0", "NCCL_TOPO_FILE": "",
                                    "NCCL_IB_GID_INDEX": "3"}


def test_bom_and_crlf_keep_the_first_line_and_the_values_clean():
    parsed = parse_env("\ufeffexport NCCL_DEBUG=INFO\r\nexport NCCL_IB_HCA=mlx5_0\r\n")
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_0"}
    assert [a.line for a in parsed.assignments] == [1, 2]


def test_markdown_prompts_traces_and_comments():
    text = "\n".join([
        "Here's the config that worked:", "```bash", "$ export NCCL_DEBUG=INFO",
        "user@node01:~/nccl-tests$ NCCL_P2P_DISABLE=1 ./build/all_reduce_perf -b 8 -e 8G",
        "(base) $ export NCCL_ALGO=Ring", "+ export NCCL_PROTO=Simple", "++ NCCL_BUFFSIZE=4194304",
        "> export NCCL_NTHREADS=256", "- `export NCCL_MIN_NCHANNELS=4`", "  - NCCL_CROSS_NIC=1",
        "# export NCCL_IB_DISABLE=1", "echo $NCCL_DEBUG", "```",
    ])
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1", "NCCL_ALGO": "Ring",
                          "NCCL_PROTO": "Simple", "NCCL_BUFFSIZE": "4194304",
                          "NCCL_NTHREADS": "256", "NCCL_MIN_NCHANNELS": "4",
                          "NCCL_CROSS_NIC": "1"}
    assert not parsed.unparsed  # a comment or a use of $NCCL_DEBUG sets nothing


def test_systemd_unit_reads_only_environment_lines():
    text = ("[Unit]\nDescription=trainer\n[Service]\n"
            'Environment="NCCL_DEBUG=INFO" "NCCL_DEBUG_SUBSYS=INIT,NET"\n'
            "Environment=NCCL_SOCKET_IFNAME=eth0\nExecStart=/usr/bin/torchrun train.py\n")
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
                          "NCCL_SOCKET_IFNAME": "eth0"}
    assert set(shapes(parsed).values()) == {"systemd Environment="}


def test_python_environ_and_ray_runtime_env():
    text = "\n".join([
        "import os", 'os.environ["NCCL_DEBUG"] = "INFO"',
        "os.environ.setdefault('NCCL_P2P_DISABLE', '1')", 'rank = int(os.environ["RANK"])',
        'ray.init(runtime_env={"env_vars": {"NCCL_SOCKET_IFNAME": "ens5", "NCCL_IB_TIMEOUT": 22}})',
    ])
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1",
                          "NCCL_SOCKET_IFNAME": "ens5", "NCCL_IB_TIMEOUT": "22"}
    assert not parsed.unparsed  # reading RANK is not setting it


def test_values_stay_unexpanded_and_quotes_go():
    text = "\n".join([
        "export MASTER_ADDR=$HEAD_NODE", 'export MASTER_PORT="${PORT:-29500}"',
        "export NCCL_DEBUG_FILE='/tmp/$USER/nccl.%h'", "export NODES=`hostname`",
        'export A="a\\"b" B=c\\ d C=$\'x\\ty\'', "export D=x#y E='multi",
        "line'", "export F=last",
    ])
    assert parse_env(text).env == {
        "MASTER_ADDR": "$HEAD_NODE", "MASTER_PORT": "${PORT:-29500}",
        "NCCL_DEBUG_FILE": "/tmp/$USER/nccl.%h", "NODES": "`hostname`", "A": 'a"b', "B": "c d",
        "C": "x\ty", "D": "x#y", "E": "multi\nline", "F": "last"}


# --- what could not be read, and notes --------------------------------------------------------

def test_unparsed_lines_are_reported_with_their_numbers():
    text = "\n".join([
        "export NCCL_DEBUG=INFO", "Setting NCCL_IB_GID_INDEX did not help",
        "torchrun --nproc_per_node=8 train.py NCCL_ALGO=Tree", "ssh node2 uptime",
        "env:", "  - name: NCCL_X", "    value: |",
    ])
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_DEBUG": "INFO"}
    assert [n for n, _ in parsed.unparsed] == [2, 3, 7]
    report = parsed.describe("env.sh")
    assert report[0] == "read 1 variable from env.sh (export 1)"
    assert "line 3: could not parse: torchrun --nproc_per_node=8 train.py NCCL_ALGO=Tree" in report


def test_a_variable_set_twice_gets_a_note_and_the_last_value():
    parsed = parse_env("export NCCL_DEBUG=INFO\nmpirun -x NCCL_DEBUG=WARN ./a.out\n")
    assert parsed.env == {"NCCL_DEBUG": "WARN"}
    (line, note), = parsed.notes
    assert line == 2 and "'INFO' on line 1" in note and "'WARN'" in note


def test_nothing_raises_on_garbage():
    for text in ["'", '"', "$(", "`", "\\", "A=(", "env: [", "- {", "<<", "\x00\x01", "=\n=",
                 "export A='" + "x\n" * 50, "#SBATCH --export='", 'Environment="A=1']:
        assert isinstance(parse_env(text), ParsedEnv)


# --- render_exports reads back ----------------------------------------------------------------

NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True)
VALUES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x00"),
                 max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(NAMES, VALUES, max_size=6))
def test_render_exports_parses_back_to_the_same_values(env):
    assert parse_env(render_exports(env, [])).env == env


def test_render_exports_with_edits_parses_back_without_the_commented_lines():
    env = {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "0",
           "NCCL_DEBUG_FILE": "/tmp/a b/%h"}
    findings = [Finding("warning", "NCCL_ALGO", "m", "f", Edit("comment", reason="debug-only")),
                Finding("info", "NCCL_IB_DISABLE", "m", "f", Edit("drop", reason="no-op")),
                Finding("warning", "NCCL_DEBUG", "m", "f", Edit("set", "WARN", "quieter"))]
    parsed = parse_env(render_exports(env, findings))
    assert parsed.env == {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/tmp/a b/%h"}
    assert not parsed.unparsed


# --- files refused ----------------------------------------------------------------------------

def test_a_fifo_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "env.fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def attempt() -> None:
        try:
            read_env_source(fifo)
        except BaseException as exc:  # noqa: B036 - handed to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "reading a FIFO blocked"
    assert len(outcome) == 1 and isinstance(outcome[0], ParameterError)
    assert "FIFO" in str(outcome[0]) and "\n" not in str(outcome[0])


@pytest.mark.parametrize("content, words", [
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", ["binary", "offset 7"]),
    ("export NCCL_DEBUG=INFO\n# caf\u00e9\n".encode("latin-1"),
     ["not UTF-8", "0xe9", "offset 28", "line 2", "iconv"]),
    (b"export A=1\n" * (2 * MAX_ENV_BYTES // 11), ["2.0 MiB", "at most 1 MiB"]),
    (b"A=1\n" * 60_000, ["60,000 lines", "50,000"]),
])
def test_files_that_are_not_an_env_block_are_refused_in_one_line(tmp_path, content, words):
    path = tmp_path / "env.sh"
    path.write_bytes(content)
    with pytest.raises(ParameterError) as caught:
        read_env_source(path)
    message = str(caught.value)
    assert all(word in message for word in words), message
    assert "\n" not in message and str(path) in message


def test_a_directory_or_a_missing_file_is_refused(tmp_path):
    with pytest.raises(ParameterError, match="it is a directory"):
        read_env_source(tmp_path)
    with pytest.raises(ParameterError, match="cannot read env file .*No such file"):
        read_env_source(tmp_path / "missing.sh")


def test_utf8_bom_and_utf16_files_are_read(tmp_path):
    (tmp_path / "bom.sh").write_bytes(b"\xef\xbb\xbfexport NCCL_DEBUG=INFO\r\n")
    (tmp_path / "ps.env").write_bytes("NCCL_DEBUG=WARN\r\n".encode("utf-16"))
    assert read_env_source(tmp_path / "bom.sh").env == {"NCCL_DEBUG": "INFO"}
    assert read_env_source(tmp_path / "ps.env").env == {"NCCL_DEBUG": "WARN"}


# --- the CLI says what it read ----------------------------------------------------------------

def parse_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


MPIRUN = ("mpirun -np 16 -x NCCL_DEBUG=WARN -x TORCH_NCCL_ASYNC_ERROR_HANDLING=1 "
          "-x LD_LIBRARY_PATH ./all_reduce_perf -b 8 -e 8G\n"
          "Setting NCCL_IB_GID_INDEX did not help\n")


@pytest.mark.parametrize("mode", ["table", "--json", "--fix"])
def test_check_says_what_it_read_and_keeps_stdout_a_list_or_a_block(tmp_path, capsys, mode):
    path = tmp_path / "launch.sh"
    path.write_text(MPIRUN)
    run(parse_args("--env-file", str(path), *([mode] if mode != "table" else [])))
    out, err = capsys.readouterr()
    report = out if mode == "table" else err
    assert report.startswith(f"read 3 variables from {path} (mpirun -x 3)")
    assert "named, value not given (not checked): LD_LIBRARY_PATH" in report
    assert "line 2: could not parse: Setting NCCL_IB_GID_INDEX did not help" in report
    if mode == "--json":
        assert isinstance(json.loads(out), list)
    if mode == "--fix":  # the block reads back to what it says, checked against shlex
        exports = dict(shlex.split(line)[1].split("=", 1) for line in out.splitlines()
                       if line.startswith("export "))
        assert exports and parse_env(out).env == exports and not parse_env(out).unparsed


def test_check_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "env.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ParameterError, match="cannot read --env-file .*FIFO"):
        run(parse_args("--env-file", str(fifo)))


def test_a_code_span_over_several_lines_is_read_line_by_line():
    text = ("It hangs with\n`export NCCL_LL_BUFFSIZE=131074 \nexport NCCL_LL128_BUFFSIZE=131072 \n"
            "export  NCCL_BUFFSIZE=1048576 `\nand works without.\n")
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_LL_BUFFSIZE": "131074", "NCCL_LL128_BUFFSIZE": "131072",
                          "NCCL_BUFFSIZE": "1048576"}
    assert [a.line for a in parsed.assignments] == [2, 3, 4] and not parsed.unparsed


def test_a_hash_prompt_is_read_only_when_nothing_else_sets_anything():
    prompt = "# mpirun -np 2 -x NCCL_DEBUG=INFO -x NCCL_IB_HCA=mlx5 ./all_reduce_perf\n"
    parsed = parse_env(prompt)
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5"}
    assert "root shell prompt" in parsed.notes[0][1]
    assert parse_env("#!/bin/bash\n" + prompt).env == {}  # a script: its # lines are comments
    assert parse_env("export NCCL_DEBUG=WARN\n" + prompt).env == {"NCCL_DEBUG": "WARN"}
    assert parse_env("# export NCCL_IB_DISABLE=1\n").env == {}  # commented out, not set


def test_python_shapes_over_lines_and_in_string_literals():
    split = 'os.environ[\n    "NCCL_NTHREADS"\n] = "1"  # one thread\nos.environ["NCCL_PROTO"] = "Simple"\n'
    assert parse_env(split).env == {"NCCL_NTHREADS": "1", "NCCL_PROTO": "Simple"}
    strings = 'command = (\n    "NCCL_DEBUG=WARN "\n    "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 "\n    f"python {script} "\n)\n'
    assert parse_env(strings).env == {"NCCL_DEBUG": "WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_a_prefix_block_ending_at_a_fence_and_pairs_in_prose():
    block = "```\nNCCL_IB_TIMEOUT=11 \\\nNCCL_DEBUG=INFO \\\n```\n"
    parsed = parse_env(block)
    assert parsed.env == {"NCCL_IB_TIMEOUT": "11", "NCCL_DEBUG": "INFO"} and not parsed.unparsed
    prose = parse_env("I worked around it with NCCL_LL_THRESHOLD=0. It was fixed in 2.4.6.\n")
    assert prose.env == {"NCCL_LL_THRESHOLD": "0"} and not prose.unparsed
    assert parse_env("Try NCCL_SOCKET_IFNAME=eth0, then NCCL_IB_TIMEOUT=1.5 too\n").env == {
        "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_TIMEOUT": "1.5"}


def test_continuation_lines_behind_the_secondary_prompt_are_read():
    typed = ("$ mpirun -np 2 \\\n>     -x NCCL_DEBUG=INFO \\\n>     -x NCCL_TREE_THRESHOLD=0 \\\n"
             ">     ./all_reduce_perf -b 8\n")
    parsed = parse_env(typed)
    assert parsed.env == {"NCCL_DEBUG": "INFO", "NCCL_TREE_THRESHOLD": "0"}
    assert [a.line for a in parsed.assignments] == [1, 1]
    assert parse_env("echo hi\n> not continued NCCL_X=1\n").env == {}  # a quote, not a prompt


def test_keyword_arguments_of_a_call_are_python_not_shell():
    call = ("with patch_env(\n    RANK=str(rank),\n    MASTER_ADDR=master_addr,\n"
            "    NCCL_ASYNC_ERROR_HANDLING='1',\n    NCCL_DEBUG=\"WARN\"):\n    run()\n")
    parsed = parse_env(call)
    assert parsed.env == {"NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN"}
    assert {"RANK", "MASTER_ADDR"} <= set(parsed.named)  # computed when the code runs


def test_pairs_joined_by_a_comma_in_prose_are_two_settings():
    said = "Hi, when running with NCCL_ALGO=Tree,NCCL_PROTO=Simple. NCCL fell back to Ring.\n"
    assert parse_env(said).env == {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}
    assert parse_env("We set NCCL_ALGO=Tree,Ring and it failed.\n").env == {
        "NCCL_ALGO": "Tree,Ring"}


def test_prose_spans_prompts_env_dicts_and_commands_held_in_a_variable():
    assert parse_env("It comes from the `NCCL_SOCKET_IFNAME=eth0`.\n").env == {
        "NCCL_SOCKET_IFNAME": "eth0"}
    assert parse_env("2. If I specify ``NCCL_ALGO=Ring`` and more\n").env == {"NCCL_ALGO": "Ring"}
    assert parse_env("set NCCL_LL_THRESHOLD=0  it works.\n").env == {"NCCL_LL_THRESHOLD": "0"}
    assert parse_env("[Core] NCCL_BLOCKING_WAIT=1 leads to a regression\n").env == {
        "NCCL_BLOCKING_WAIT": "1"}
    assert parse_env("the command is : NCCL_DEBUG=INFO ./build/all_reduce_perf -b 8\n").env == {
        "NCCL_DEBUG": "INFO"}
    assert parse_env("machine1:~/nccl-tests$ NCCL_DEBUG=INFO mpirun.mpich -np 2 ./a\n").env == {
        "NCCL_DEBUG": "INFO"}
    code = ("os.environ['NCCL_ALGOS'] = 'SCCL,' + existing\nenv['NCCL_IB_AR_THRESHOLD'] = '0'\n")
    parsed = parse_env(code)
    assert parsed.env == {"NCCL_IB_AR_THRESHOLD": "0"} and "NCCL_ALGOS" in parsed.named
    held = 'cmd="${MPI_BIN} -np 2 \\\n  -x NCCL_DEBUG=WARN \\\n  -x FI_PROVIDER=\\"efa\\" \\\n  ./bin"\neval ${cmd}\n'
    env = parse_env(held).env
    assert env["NCCL_DEBUG"] == "WARN" and env["FI_PROVIDER"] == "efa"


def test_a_pasted_benchmark_says_which_collectives_the_job_runs():
    assert parse_env("NCCL_ALGO=Tree mpirun -np 8 ./build/all_reduce_perf -b 8\n").runs == {
        "AllReduce"}
    assert parse_env("NCCL_ALGO=Tree torchrun train.py\n").runs is None
    assert parse_env("export NCCL_ALGO=Tree\n").runs is None


# --- PowerShell ---------------------------------------------------------------------------------

@pytest.mark.parametrize("line,env", [
    ('$env:NCCL_DEBUG = "INFO"  # comment', {"NCCL_DEBUG": "INFO"}),
    ("$Env:NCCL_IB_HCA='mlx5_0'", {"NCCL_IB_HCA": "mlx5_0"}),
    ('${env:NCCL_P2P_LEVEL} = "NVL"; $ENV:NCCL_NSOCKS_PERTHREAD = 4',
     {"NCCL_P2P_LEVEL": "NVL", "NCCL_NSOCKS_PERTHREAD": "4"}),
    ("$env:NCCL_NTHREADS = 0x100", {"NCCL_NTHREADS": "256"}),  # an integer, as PowerShell prints it
    ("$env:NCCL_DEBUG = 'it''s'", {"NCCL_DEBUG": "it's"}),  # '' is one quote, nothing expands
    ('$env:NCCL_DEBUG = "a`"b"', {"NCCL_DEBUG": 'a"b'}),  # the backtick escapes in "..."
    ('$env:NCCL_TOPO_FILE = "$HOME\\topo.xml"', {"NCCL_TOPO_FILE": "$HOME\\topo.xml"}),
    ("$env:NCCL_DEBUG = \u201cINFO\u201d", {"NCCL_DEBUG": "INFO"}),  # typographic quotes count
    ('PS C:\\Users\\me> $env:NCCL_DEBUG = "WARN"', {"NCCL_DEBUG": "WARN"}),
    ('Run `$env:NCCL_DEBUG = "INFO"` first.', {"NCCL_DEBUG": "INFO"}),
    ('[Environment]::SetEnvironmentVariable("NCCL_DEBUG", "INFO")', {"NCCL_DEBUG": "INFO"}),
    ("Set-Item -Path Env:NCCL_DEBUG -Value INFO", {"NCCL_DEBUG": "INFO"}),
    ('si Env:\\NCCL_DEBUG "WARN"', {"NCCL_DEBUG": "WARN"}),
    ('Set-Item -Path "Env:NCCL_DEBUG" -Value:"INFO"', {"NCCL_DEBUG": "INFO"}),
    ("New-Item -Path Env: -Name NCCL_DEBUG -Value INFO -Force", {"NCCL_DEBUG": "INFO"}),
])
def test_powershell_assignments_are_read_with_its_quoting(line, env):
    parsed = parse_env(line)
    assert parsed.env == env and not parsed.unparsed
    assert all(a.shape.startswith("powershell") for a in parsed.assignments)


def test_powershell_computed_values_removals_and_reads():
    parsed = parse_env('$env:NCCL_DEBUG = $env:OTHER\n$env:NCCL_ALGO = "Ri" + "ng"\n'
                       '$env:NCCL_SOCKET_IFNAME += ",eth1"\n')
    assert parsed.named == ["NCCL_DEBUG", "NCCL_ALGO"]
    assert parsed.env == {"NCCL_SOCKET_IFNAME": "$env:NCCL_SOCKET_IFNAME,eth1"}  # computed
    removed = ("export NCCL_DEBUG=INFO\nexport NCCL_ALGO=Ring\nexport NCCL_PROTO=Simple\n"
               "$env:NCCL_DEBUG = $null\nRemove-Item Env:NCCL_ALGO\n"
               "[Environment]::SetEnvironmentVariable('NCCL_PROTO', '')\n")
    assert parse_env(removed).env == {}
    assert parse_env("Remove-Item -Path $env:TEMP\\nccl* -Force\n").env == {}  # a read
    assert parse_env("```powershell\n$env:NCCL_DEBUG = 'INFO'\n```\n").env == {
        "NCCL_DEBUG": "INFO"}


def test_powershell_user_scope_is_read_with_a_note_that_this_session_does_not_get_it():
    parsed = parse_env("[System.Environment]::SetEnvironmentVariable('NCCL_DEBUG', 'WARN', "
                       "[System.EnvironmentVariableTarget]::User)\n")
    assert parsed.env == {"NCCL_DEBUG": "WARN"}
    assert "not to this session" in parsed.notes[0][1]


# --- NO-BREAK and other Unicode spaces ----------------------------------------------------------

def test_unicode_spaces_outside_quotes_read_as_plain_spaces():
    parsed = parse_env("`export\u00a0NCCL_BLOCKING_WAIT=1`\nexport\u3000NCCL_DEBUG=INFO\n"
                       "export NCCL_\u200bALGO=Ring\n")
    assert parsed.env == {"NCCL_BLOCKING_WAIT": "1", "NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring"}
    assert [n for n, _ in parsed.notes] == [1, 2, 3]
    assert "U+00A0 (NO-BREAK SPACE)" in parsed.notes[0][1]
    assert "dropped U+200B" in parsed.notes[2][1]
    # inside a closed quote the character is the value's own: the process gets it
    assert parse_env('export NCCL_SOCKET_IFNAME="eth\u00a00"\n').env == {
        "NCCL_SOCKET_IFNAME": "eth\u00a00"}
    assert parse_env("export A=1 # it's 'x\u00a0y'\n").notes == []  # a comment: nothing read


# --- NCCL's own log lines -----------------------------------------------------------------------

@pytest.mark.parametrize("line,env", [
    ("h:1:2 [0] NCCL INFO NCCL_IB_RETRY_CNT set by environment to 15.", {"NCCL_IB_RETRY_CNT": "15"}),
    ("NCCL_IB_PCI_RELAXED_ORDERING set by environment to 1.", {"NCCL_IB_PCI_RELAXED_ORDERING": "1"}),
    ("h:1:2 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 1.",
     {"NCCL_COLLNET_ENABLE": "1"}),
    ("h:1:2 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0.",  # %s: no full stop
     {"NCCL_SOCKET_IFNAME": "eth0."}),
    ("[1,0]<stdout>:h:1:2 [0] NCCL INFO NCCL_ALGO set by environment to Tree,Ring",
     {"NCCL_ALGO": "Tree,Ring"}),
    ("h:1:2 [0] NCCL INFO NCCL_SOCKET_IFNAME set to en", {"NCCL_SOCKET_IFNAME": "en"}),
    ("h:1:2 [0] NCCL INFO Comm config cgaClusterSize reset to NCCL_MAX_CGA_CLUSTER_SIZE=4",
     {"NCCL_MAX_CGA_CLUSTER_SIZE": "4"}),
    ("h:1:2 [0] NCCL INFO Invalid value 99999999999999999999 for NCCL_IB_TIMEOUT, using default "
     "20.", {"NCCL_IB_TIMEOUT": "99999999999999999999"}),
    ("h:1:2 [0] NCCL INFO P2P Chunksize set to 131072", {}),
    ("I think NCCL_IB_TIMEOUT set by environment to 22 is wrong", {}),  # prose, not the format
])
def test_nccl_log_lines_that_echo_a_setting_are_read_by_their_format(line, env):
    parsed = parse_env(line + "\n")
    assert parsed.env == env
    assert all(a.shape == "NCCL log" for a in parsed.assignments)
    assert bool(env) == any("NCCL's own log lines" in note for _, note in parsed.notes)


def test_a_level_echo_that_came_from_p2p_disable_is_not_a_setting():
    log = "h:1:2 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to LOC\n"
    assert parse_env(log).env == {"NCCL_P2P_LEVEL": "LOC"}
    parsed = parse_env("export NCCL_P2P_DISABLE=1\n" + log)  # NCCL < 2.23.4 printed this for it
    assert parsed.env == {"NCCL_P2P_DISABLE": "1"} and "2.23.4" in parsed.notes[0][1]


@pytest.mark.parametrize("log,nets", [
    ("h:1:2 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so\n"
     "h:1:2 [0] NCCL INFO P2P plugin IBext_v8\nh:1:2 [0] NCCL INFO Using network IBext_v8\n",
     ["IBext_v8"]),  # "Using network" says which one is in use
    ("h:1:2 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so\n"
     "h:1:2 [0] NCCL INFO Using network IB\n", ["IB"]),  # loaded, but NCCL's own IB is used
    ("h:1:2 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v6 (v6)\n",
     ["NCCL RDMA Plugin v6"]),
    ("h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [receive] via NET/IBext_v8/1\n",
     ["IBext_v8"]),
    ("h:1:2 [0] NCCL INFO NET/IBext : Using [0]mlx5_0:1/IB ; OOB eth0\n", ["IBext"]),
    ('echo "Using network interface: ${interface}"\n', []),
])
def test_the_networks_a_pasted_log_shows(log, nets):
    assert [name for name, _ in parse_env(log).nets] == nets


def test_a_reply_that_opens_with_a_mention_is_prose():
    said = "@tingweiwu I tried using NCCL_SOCKET_IFNAME=^docker0    , but that did not work\n"
    assert parse_env(said).env == {"NCCL_SOCKET_IFNAME": "^docker0"}
