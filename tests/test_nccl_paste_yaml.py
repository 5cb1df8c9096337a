"""labkit.nccl.yamlenv and here-documents: env maps under the keys people use for them, nested
``set:`` / ``unset:`` maps (Ramble, Spack), flow mappings that hold an env key, and YAML written
by a shell here-document, read as structured settings."""

from __future__ import annotations

import pytest

from labkit.nccl import check_env
from labkit.nccl.paste import parse_env

RAMBLE = """ramble:
  variables:
    mpi_command: srun {srun_args}
  env_vars:
    set:
      NCCL_IB_GID_INDEX: 3
      NCCL_IB_HCA: "=mlx5_0,mlx5_1"
      NCCL_DEBUG: DEBUG
    unset:
    - NCCL_ALGO
  applications:
    nccl-tests: {}
"""


def test_env_vars_set_and_unset_maps():
    parsed = parse_env("export NCCL_ALGO=Ring\n" + RAMBLE)
    assert {k: v for k, v in parsed.env.items() if k.startswith("NCCL_")} == {
        "NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": "=mlx5_0,mlx5_1", "NCCL_DEBUG": "DEBUG"}
    assert [a.shape for a in parsed.assignments if a.name == "NCCL_ALGO"] == ["export", "unset"]
    assert not parsed.unparsed and not parsed.loose
    spack = parse_env("env_vars:\n  prepend_path:\n    LD_LIBRARY_PATH: /opt/nccl/lib\n"
                      "  set:\n    NCCL_DEBUG: WARN\n")
    assert spack.env == {"NCCL_DEBUG": "WARN"} and spack.named == ["LD_LIBRARY_PATH"]


@pytest.mark.parametrize("text", [
    "job:\n  environment_variables:\n    NCCL_DEBUG: DEBUG\n",
    "spec:\n  envVars:\n    NCCL_DEBUG: DEBUG\n",
    "extraEnv:\n  - name: NCCL_DEBUG\n    value: DEBUG\n",
    "environment:\n  variables:\n    NCCL_DEBUG: DEBUG\n",
    "modules:\n  environment:\n    set:\n      NCCL_DEBUG: DEBUG\n",
    "runtime_env:\n  env_vars:\n    NCCL_DEBUG: DEBUG\n",
    "container:\n  env:\n    - name: NCCL_DEBUG\n      value: DEBUG\n",
    "runtime_env: {env_vars: {NCCL_DEBUG: DEBUG}}\n",
    "container: {env: [{name: NCCL_DEBUG, value: DEBUG}]}\n",
    "environment: {variables: {NCCL_DEBUG: DEBUG}}\n",
    "env_vars:\n  set: {NCCL_DEBUG: DEBUG}\n",
])
def test_the_family_of_env_keys_is_read_as_structured_settings(text):
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_DEBUG": "DEBUG"} and {a.shape for a in parsed.assignments} == {
        "yaml env"}
    found = check_env(parsed.env, **parsed.job)
    assert [f.severity for f in found] == ["error"]  # a value NCCL rejects, read structurally


def test_flow_mappings_keep_scalars_as_written_and_name_what_comes_from_elsewhere():
    parsed = parse_env("container: {env: [{name: NCCL_IB_HCA, valueFrom: {x: y}}, "
                       "{name: NCCL_IB_GID_INDEX, value: 3}]}\n"
                       "runtime_env: {env_vars: {NCCL_ALGO: ~, NCCL_PROTO: Simple}}\n")
    assert parsed.env == {"NCCL_IB_GID_INDEX": "3", "NCCL_PROTO": "Simple"}
    assert parsed.named == ["NCCL_IB_HCA", "NCCL_ALGO"]


def test_keys_next_to_a_nested_env_map_are_the_jobs_settings_not_variables():
    parsed = parse_env("environment:\n  environment_variables:\n    - NCCL_DEBUG=INFO\n"
                       "  force_pull_image: true\n  image:\n    gpu: some/image:1\n")
    assert parsed.env == {"NCCL_DEBUG": "INFO"} and not parsed.unparsed


def test_yaml_written_by_a_here_document_is_read_as_yaml():
    text = ("cat <<EOF >\"${DIR}\"/ramble.yaml\n" + RAMBLE.replace("{srun_args}", "\\${A}")
            + "EOF\n\ncat <<EOF > job.tpl\n#SBATCH -N {n_nodes}\n{command}\nEOF\n")
    parsed = parse_env(text)
    assert parsed.env["NCCL_DEBUG"] == "DEBUG" and parsed.env["mpi_command"] == "srun ${A}"
    assert [a.line for a in parsed.assignments if a.name == "NCCL_DEBUG"] == [9]
    assert [f.severity for f in check_env(parsed.env, **parsed.job)
            if f.variable == "NCCL_DEBUG"] == ["error"]


def test_a_here_document_keeps_its_body_to_itself():
    quoted = parse_env("cat <<'EOF' > a.yaml\nenv:\n  NCCL_SOCKET_IFNAME: \\${IF}\nEOF\n"
                       "  NCCL_ALGO: Ring\n")
    assert quoted.env == {"NCCL_SOCKET_IFNAME": "\\${IF}", "NCCL_ALGO": "Ring"}
    tabs = parse_env("\tcat <<-EOF > b.yaml\n\tenv_vars:\n\t  set:\n\t    NCCL_DEBUG: WARN\n"
                     "\tEOF\necho done\n")
    assert tabs.env == {"NCCL_DEBUG": "WARN"} and [a.line for a in tabs.assignments] == [4]
    script = parse_env("ssh node bash <<EOF\nexport NCCL_DEBUG=INFO\nEOF\n")
    assert script.env == {"NCCL_DEBUG": "INFO"}
