"""labkit.nccl.paste, the shapes that hide settings inside other text: NCCL's config files, shell
statements in strings and ``$(...)``, YAML nulls and continued values, Python/JSON dict literals.
"""

from __future__ import annotations

import pytest

from labkit.nccl.check import check_env
from labkit.nccl.paste import ParsedEnv, parse_env
from labkit.nccl.shellwords import (
    Redirect,
    Word,
    computed,
    split_words,
    substitutions,
    tilde_expands,
)


def shapes(parsed: ParsedEnv) -> dict[str, str]:
    return {a.name: a.shape for a in parsed.assignments}


# --- NCCL's config files ----------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "RUN echo NCCL_IB_TIMEOUT=22 >> /etc/nccl.conf && \\\n"
    "    echo NCCL_ALGO=Ring >> /etc/nccl.conf",
    "printf 'NCCL_IB_TIMEOUT=22\\nNCCL_ALGO=Ring\\n' > ~/.nccl.conf",
    'printf "%s\\n" NCCL_IB_TIMEOUT=22 NCCL_ALGO=Ring > "$NCCL_CONF_FILE"',
    "echo -e 'NCCL_IB_TIMEOUT=22\\nNCCL_ALGO=Ring' | sudo tee -a /etc/nccl.conf > /dev/null",
    "mkdir -p /etc && cat > /etc/nccl.conf <<'EOF'\nNCCL_IB_TIMEOUT=22\n# a comment\n"
    "NCCL_ALGO=Ring\nEOF",
    "sudo tee ~/.nccl.conf <<-END\n\tNCCL_IB_TIMEOUT=22\n\tNCCL_ALGO=Ring\n\tEND",
])
def test_lines_written_to_nccl_conf_are_read_as_nccl_reads_them(text):
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_IB_TIMEOUT": "22", "NCCL_ALGO": "Ring"}
    assert set(shapes(parsed).values()) == {"nccl.conf"} and not parsed.unparsed


def test_nccl_conf_keeps_quotes_and_blanks_and_the_environment_wins():
    parsed = parse_env("cat >> /etc/nccl.conf << EOF\nNCCL_DEBUG=\"WARN\"\nNCCL_ALGO = Ring\nEOF\n"
                       "echo NCCL_IB_HCA=mlx5_0 >> /etc/nccl.conf\nexport NCCL_IB_HCA=mlx5_1\n"
                       "echo NCCL_PROTO=LL >> /etc/nccl.conf\necho NCCL_PROTO=Simple >> "
                       "~/.nccl.conf\n")
    # setEnvFile keeps quotes; the name before '=' keeps its blank; setenv(..., 0) keeps the
    # environment's value; the user's file is read before /etc/nccl.conf
    assert parsed.env == {"NCCL_DEBUG": '"WARN"', "NCCL_IB_HCA": "mlx5_1", "NCCL_PROTO": "Simple"}
    notes = " ".join(note for _, note in parsed.notes)
    assert "keeps the quotes" in notes and "'NCCL_ALGO '" in notes
    assert "the environment's 'mlx5_1' wins" in notes and "keeps the first value" in notes


def test_nccl_conf_files_nccl_does_not_read_are_said_so():
    custom = parse_env("echo NCCL_DEBUG=WARN >> /opt/nccl.conf")
    assert custom.env == {"NCCL_DEBUG": "WARN"} and "only when NCCL_CONF_FILE names it" in \
        custom.notes[0][1]
    skipped = parse_env("export NCCL_CONF_FILE=/opt/nccl.conf\necho NCCL_ALGO=Tree >> ~/.nccl.conf")
    assert skipped.env == {"NCCL_CONF_FILE": "/opt/nccl.conf"}  # read instead of ~/.nccl.conf
    assert "left out" in skipped.notes[0][1]


def test_a_heredoc_to_another_file_is_read_as_shell_and_echo_elsewhere_sets_nothing():
    parsed = parse_env("cat > job.sh << EOF\nexport NCCL_DEBUG=INFO\nEOF\n"
                       "echo NCCL_ALGO=Ring > notes.txt\n")
    assert parsed.env == {"NCCL_DEBUG": "INFO"}
    assert shapes(parsed) == {"NCCL_DEBUG": "export"}


def test_redirections_are_tokens_with_their_targets():
    tokens, _ = split_words(x := "echo A=1 >> '/etc/nccl.conf' 2>&1 <<EOF", 0, len(x))
    assert tokens == [Word("echo", "echo"), Word("A=1", "A=1"), Redirect(">>", "/etc/nccl.conf"),
                      Redirect("<<", "EOF")]
    assert substitutions("a$(b $(c))`d`$((1+2))") == ["b $(c)", "d"]


# --- shell statements inside strings and $(...) -----------------------------------------------

@pytest.mark.parametrize("text", [
    'cmd = "export NCCL_IB_DISABLE=1;export NCCL_DEBUG=WARN"',
    "setup: 'export NCCL_IB_DISABLE=1 && export NCCL_DEBUG=WARN && python train.py'",
    'os.system("env NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN ./run.sh")',
    'LAUNCH="export NCCL_IB_DISABLE=1; export NCCL_DEBUG=WARN; torchrun x.py"',
    "  - 'cd /w; export NCCL_IB_DISABLE=1; export NCCL_DEBUG=WARN'",
])
def test_quoted_strings_that_are_shell_statements_are_read(text):
    assert {k: v for k, v in parse_env(text).env.items() if k.startswith("NCCL_")} == {
        "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN"}


def test_prefix_assignments_kept_in_a_variable_are_read():
    # OPTS="A=1 B=2" then eval "$OPTS deepspeed ...": every word an assignment, one of them watched
    parsed = parse_env('OPTIONS_NCCL="NCCL_DEBUG=warning NCCL_IB_DISABLE=0"\n'
                       'run_cmd="${OPTIONS_NCCL} deepspeed train.py"\neval ${run_cmd}\n')
    assert {k: v for k, v in parsed.env.items() if k.startswith("NCCL_")} == {
        "NCCL_DEBUG": "warning", "NCCL_IB_DISABLE": "0"}
    assert not parsed.loose
    for other in ('MSG="set NCCL_DEBUG=INFO to see more"', 'OPTS="HOME=/x PATH=/y"'):
        assert not {k for k in parse_env(other).env if k.startswith("NCCL_")}, other


def test_a_variable_one_command_sets_twice_is_a_warning():
    parsed = parse_env("mpirun -np 2 -x NCCL_IB_DISABLE=0 -x NCCL_DEBUG=WARN \\\n"
                       "    -x NCCL_IB_DISABLE=1 ./run\nexport NCCL_DEBUG=INFO\n")
    assert parsed.twice == (("NCCL_IB_DISABLE", ("0", "1"), 1),)  # NCCL_DEBUG: two commands
    found = [f for f in check_env(parsed.env, **parsed.job) if "in one command" in f.message]
    assert [(f.severity, f.variable) for f in found] == [("warning", "NCCL_IB_DISABLE")]
    assert "'0', '1'" in found[0].message and found[0].source.startswith("https://")


def test_prose_in_a_string_is_not_read_and_bash_c_is_read_once():
    prose = parse_env('hint = "to debug, run export NCCL_DEBUG=INFO first"')
    assert prose.env == {} and prose.unparsed
    once = parse_env("bash -c 'export NCCL_DEBUG=WARN; echo \"$(NCCL_ALGO=Ring ./x)\"'")
    assert [a.name for a in once.assignments] == ["NCCL_DEBUG", "NCCL_ALGO"]


def test_prefix_assignments_inside_command_substitutions_are_read():
    parsed = parse_env("res=$(NCCL_SHM_DISABLE=1 NCCL_NET='My Net' \\\n    timeout 60 \\\n"
                       "    ./all_gather_perf -b 8 2>&1) || rc=$?\nOUT=`NCCL_PROTO=Simple ./x`\n")
    assert {k: v for k, v in parsed.env.items() if k.startswith("NCCL_")} == {
        "NCCL_SHM_DISABLE": "1", "NCCL_NET": "My Net", "NCCL_PROTO": "Simple"}
    assert shapes(parsed)["NCCL_NET"] == "prefix" and not parsed.unparsed


# --- YAML -------------------------------------------------------------------------------------

def test_yaml_null_values_are_named_not_set():
    parsed = parse_env("env_vars:\n  NCCL_DEBUG: null  # set INFO to debug\n  NCCL_ALGO: ~\n"
                       "  NCCL_PROTO: 'null'\n  NCCL_IB_HCA:\nNCCL_CROSS_NIC: Null\n"
                       "env: {NCCL_TOPO_FILE: NULL, NCCL_IB_SL: 1}\n")
    assert parsed.env == {"NCCL_PROTO": "null", "NCCL_IB_SL": "1"}
    assert set(parsed.named) == {"NCCL_DEBUG", "NCCL_ALGO", "NCCL_IB_HCA", "NCCL_CROSS_NIC",
                                 "NCCL_TOPO_FILE"}
    k8s = parse_env("env:\n- name: NCCL_DEBUG\n  value: null\n- {name: NCCL_ALGO, value: ~}\n")
    assert k8s.env == {"NCCL_DEBUG": "", "NCCL_ALGO": ""}  # the API's default value is ""


def test_yaml_values_continued_on_the_next_lines():
    parsed = parse_env("environment:\n  NCCL_IB_HCA:\n    \"=mlx5_0:1,\n    mlx5_1:1\"\n"
                       "  NCCL_SOCKET_IFNAME: eth0,\n    eth1\n  NCCL_ALGO: Ring\n"
                       "  NCCL_TOPO_FILE:\n    path: /x\n")
    assert parsed.env == {"NCCL_IB_HCA": "=mlx5_0:1, mlx5_1:1", "NCCL_SOCKET_IFNAME": "eth0, eth1",
                          "NCCL_ALGO": "Ring"}
    assert [n for n, _ in parsed.unparsed] == [8]  # a mapping is not a variable's value
    k8s = parse_env("env:\n  - name: NCCL_IB_HCA\n    value:\n      'mlx5_0'\n")
    assert k8s.env == {"NCCL_IB_HCA": "mlx5_0"}


# --- dict literals ----------------------------------------------------------------------------

def test_python_dict_literal_reads_literals_and_names_computed_values():
    parsed = parse_env('    job(env_vars={\n        "CUDA_DEVICE_MAX_CONNECTIONS": "1",\n'
                       '        "RUN_DIR": os.getcwd(),  # computed\n'
                       '        "NCCL_IB_HCA": "mlx5_0,"\n                       "mlx5_1",\n'
                       '        "NCCL_NET_PLUGIN": "",\n        "NCCL_MIN_CTAS": 4,\n'
                       '        "NCCL_DEBUG_FILE": f"/logs/{rank}.log",\n'
                       '        "lr": "0.1",\n    })\n')
    assert parsed.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_IB_HCA": "mlx5_0,mlx5_1",
                          "NCCL_NET_PLUGIN": "", "NCCL_MIN_CTAS": "4"}
    assert parsed.named == ["RUN_DIR", "NCCL_DEBUG_FILE"]
    assert set(shapes(parsed).values()) == {"dict literal"} and not parsed.unparsed


def test_json_objects_nested_and_dicts_that_are_not_environments():
    parsed = parse_env('{\n  "configurations": [{\n    "name": "train",\n    "env": {\n'
                       '      "NCCL_DEBUG": "WARN", // why\n      "NCCL_ALGO": null\n    }\n'
                       '  }]\n}\nconfig = {"lr": 0.1}\nsubprocess.run(c, env={**os.environ, '
                       '"NCCL_P2P_LEVEL": "NVL"})\n')
    assert parsed.env == {"NCCL_DEBUG": "WARN", "NCCL_P2P_LEVEL": "NVL"}
    assert parsed.named == ["NCCL_ALGO"]


@pytest.mark.timeout(120)  # a bound on a hang, not a speed: a quadratic read takes far longer
def test_many_literals_stay_fast():
    text = "\n".join(f'cfg{i} = {{"lr": {i}, "x": [1, 2]}}' for i in range(20_000))
    assert parse_env(text + '\nenv = {"NCCL_DEBUG": "WARN"}').env == {"NCCL_DEBUG": "WARN"}


# --- what the shell computes: substitutions and ~ ---------------------------------------------

def test_a_backquoted_command_is_a_substitution_like_dollar_parens():
    parsed = parse_env("MASTER_ADDR=`hostname` mpiexec -np 2 ./launcher.sh python t.py\n"
                       'export NCCL_SOCKET_IFNAME="`ip -o route get 1 | cut -d\\  -f5`"\n')
    assert parsed.env == {"MASTER_ADDR": "`hostname`",
                          "NCCL_SOCKET_IFNAME": "`ip -o route get 1 | cut -d\\  -f5`"}
    assert computed("`hostname`") == computed("$(hostname -s)") == "a command substitution"
    assert computed("$HOSTNAME") == computed("$((1 + 1))") == "a shell expansion"
    assert computed("node`1") == computed("eth0") == ""


@pytest.mark.parametrize("text,expands", [
    ("export NCCL_TOPO_FILE=~/t.xml\n", True),
    ("NCCL_TOPO_FILE=~/t.xml\n", True),
    ("NCCL_TOPO_FILE=~user/t.xml ./run\n", True),
    ("declare -x NCCL_TOPO_FILE=~/t.xml\n", True),
    ("mpirun -np 2 -x NCCL_TOPO_FILE=~/t.xml ./run\n", True),  # bash: looks like an assignment
    ("docker run -e NCCL_TOPO_FILE=~/t.xml img\n", True),
    ("env NCCL_TOPO_FILE=~/t.xml ./run\n", True),
    ("mpirun -genv NCCL_TOPO_FILE ~/t.xml ./run\n", True),  # a word that opens with ~
    ("bash -c 'mpirun -x NCCL_TOPO_FILE=~/t.xml ./run'\n", True),
    ('export NCCL_TOPO_FILE="~/t.xml"\n', False),
    ("export NCCL_TOPO_FILE=\\~/t.xml\n", False),
    ("#!/bin/sh\nmpirun -x NCCL_TOPO_FILE=~/t.xml ./run\n", False),  # POSIX mode: literal
    ("sh -c 'mpirun -x NCCL_TOPO_FILE=~/t.xml ./run'\n", False),
    ("#!/bin/sh\nexport NCCL_TOPO_FILE=~/t.xml\n", True),
    ("srun --export=ALL,NCCL_TOPO_FILE=~/t.xml ./run\n", False),  # not an assignment word
    ("docker run --env=NCCL_TOPO_FILE=~/t.xml img\n", False),
    ("#SBATCH --export=NCCL_TOPO_FILE=~/t.xml\n", False),  # sbatch reads it, not a shell
    ("ENV NCCL_TOPO_FILE=~/t.xml\n", False),  # a Dockerfile
    ("env:\n  NCCL_TOPO_FILE: ~/t.xml\n", False),  # YAML
    ('os.environ["NCCL_TOPO_FILE"] = "~/t.xml"\n', False),
])
def test_the_shell_expands_a_tilde_only_where_bash_does(text, expands):
    parsed = parse_env(text)
    assert parsed.env["NCCL_TOPO_FILE"] == "~/t.xml" or parsed.env["NCCL_TOPO_FILE"] == \
        "~user/t.xml"  # values stay as written
    assert ("NCCL_TOPO_FILE" in parsed.tilde) is expands
    assert parsed.job["tilde"] == parsed.tilde


def test_tilde_prefix_is_unquoted_and_ends_at_a_slash():
    assert tilde_expands("~") and tilde_expands("~/x") and tilde_expands("~me/x")
    assert not tilde_expands('"~/x"') and not tilde_expands("\\~/x")
    assert not tilde_expands("~'me'/x") and not tilde_expands("/x/~")


# --- how many nodes the paste runs on ---------------------------------------------------------

@pytest.mark.parametrize("text,nodes", [
    ("#!/bin/bash\n#SBATCH --nodes 2  # two of them\nsrun python train.py\n", 2),
    ("#SBATCH -N4\nsrun ./run\n", 4),
    ("##SBATCH --nodes 4\n#SBATCH --nodes=1\n", 1),  # a disabled directive
    ("# srun -N 8 ./run\nexport NCCL_DEBUG=WARN\n", None),  # a comment
    ("srun -N2 --ntasks-per-node=1 bash run.sh\n", 2),
    ("srun -N 1 mpirun -N 4 ./a\n", 1),  # mpirun's -N is ranks per node
    ("torchrun --nnodes=1:4 --nproc-per-node=8 train.py\n", 4),
    ("NNODES=2\ntorchrun --nnodes $NNODES train.py\n", 2),
    ("torchrun --nnodes=$SLURM_NNODES train.py\n", None),
    ("python -m torch.distributed.run --nnodes 3 t.py\n", 3),
    ("deepspeed --num_nodes 2 --num_gpus 8 t.py\n", 2),
    ("accelerate launch --num_machines 2 t.py\n", 2),
    ("mpirun -np 16 -H node1:8,node2:8 ./all_reduce_perf\n", 2),
    ("mpirun -np 16 --hostfile hosts ./all_reduce_perf\n", None),
    ("#PBS -l select=2:ncpus=64:ngpus=4\n", 2),
    ("#PBS -l select=1:host=a+1:host=b\n", 2),
    ("#PBS -l nodes=3:ppn=8\n", 3),
    ("#BSUB -nnodes 2\n", 2),
    ("#FLUX: -N 2\n", 2),
    ("export NCCL_SOCKET_IFNAME=lo\npython train.py --nodes 2\n", None),  # the script's own
])
def test_the_paste_says_how_many_nodes_a_launch_spans(text, nodes):
    assert parse_env(text).nodes == nodes
