"""SLURM: host-list and tasks-per-node parsing, the layout, and the plan."""

from __future__ import annotations

import pytest

from distrib.cluster import SlurmClusterResolver, expand_hostlist, expand_tasks_per_node
from distrib.cluster.slurm import slurm_layout
from distrib.errors import ConfigError


@pytest.mark.parametrize(("hostlist", "hosts"), [
    ("n[1-2],m5,o[3-4,6,7-9]", ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]),
    ("node1", ["node1"]),
    ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
    ("a,b", ["a", "b"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("n[7]", ["n7"]),
])
def test_expand_hostlist(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist", ["n[1-", "n[1-2", "n[[1]]", "n[a-b]", "n[3-1]", "n1,,n2",
                                      "n1]"])
def test_malformed_hostlist(hostlist: str) -> None:
    with pytest.raises(ConfigError) as info:
        expand_hostlist(hostlist)
    text = str(info.value)
    assert text.startswith(f"SLURM_STEP_NODELIST = {hostlist!r}")
    assert 'Invalid hostlist format' in text and "Fix: use SLURM's syntax" in text


def test_expand_tasks_per_node() -> None:
    assert expand_tasks_per_node("3(x2),2,1") == [3, 3, 2, 1]
    assert expand_tasks_per_node("4") == [4]


@pytest.mark.parametrize("text", ["3(x)", "x2", "3(2)", "0", "2,,1", ""])
def test_malformed_tasks_per_node(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        expand_tasks_per_node(text)
    assert str(info.value).startswith(f"SLURM_STEP_TASKS_PER_NODE = {text!r}")
    assert "Invalid tasks-per-node list format" in str(info.value)


def _step(rank: int, nodelist: str = "n[1-2]", per_node: str = "2(x2)",
          tasks: int = 4) -> dict[str, str]:
    return {"SLURM_PROCID": str(rank), "SLURM_STEP_NUM_TASKS": str(tasks),
            "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": per_node}


def test_layout_ports_jobs_and_gpus() -> None:
    lay = slurm_layout(_step(1), jobs={"ps": 1, "worker": 3}, port_base=9000,
                       gpus_per_node=4)
    assert lay.cluster() == {"ps": ["n1:9000"], "worker": ["n1:9001", "n2:9000", "n2:9001"]}
    assert (lay.task_type, lay.task_id, lay.gpus_per_task) == ("worker", 0, 2)


def test_layout_errors() -> None:
    with pytest.raises(ConfigError, match="Requested 5 tasks but only 4 were assigned"):
        slurm_layout(_step(0), jobs={"worker": 5})
    with pytest.raises(ConfigError, match="Requested more GPUs per node then available"):
        slurm_layout(_step(0), gpus_per_node=2, gpus_per_task=2)
    with pytest.raises(ConfigError, match=r"SLURM_PROCID = 4: must be in \[0, "):
        slurm_layout(_step(4))
    with pytest.raises(ConfigError, match="gives 1 node"):
        slurm_layout(_step(0, per_node="4"))
    with pytest.raises(ConfigError, match="adds up to 3 tasks"):
        slurm_layout(_step(0, per_node="2,1"))
    with pytest.raises(ConfigError, match="Not running inside a SLURM step"):
        slurm_layout({"SLURM_PROCID": "0"})
    with pytest.raises(ConfigError, match="--distribution=block"):
        slurm_layout({**_step(2), "SLURMD_NODENAME": "n1"})


def _setenv(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_resolver_two_nodes_two_tasks_each(monkeypatch: pytest.MonkeyPatch) -> None:
    _setenv(monkeypatch, {**_step(3), "SLURMD_NODENAME": "n2"})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    r = SlurmClusterResolver()
    assert r.cluster_spec().as_dict() == {"worker": ["n1:8888", "n1:8889", "n2:8888",
                                                     "n2:8889"]}
    assert (r.task_type, r.task_id, r.local_world_size) == ("worker", 3, 2)
    assert r.master() == "grpc://n2:8889"
    assert r.num_accelerators() == {"GPU": 1}
    plan = r.process_plan(2)
    assert (plan.rank, plan.world_size, plan.local_rank, plan.local_world_size) == (3, 4, 1, 2)
    assert (plan.master_addr, plan.master_port, plan.bind_addr) == ("n1", 8888, "n2")
    assert (plan.id_in_cluster, plan.num_workers, plan.source) == (1, 2, "slurm")
    assert plan.task_names == ("worker:0", "worker:1", "worker:2", "worker:3")
    with pytest.raises(ConfigError, match="srun started 2 training task"):
        r.process_plan(1)


def test_uneven_nodes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _setenv(monkeypatch, _step(0, nodelist="n[1-2]", per_node="2,1", tasks=3))
    r = SlurmClusterResolver(gpus_per_node=0)
    with pytest.raises(ConfigError) as info:
        r.process_plan(r.local_world_size)
    assert "same --ntasks-per-node" in str(info.value)


def test_one_task_per_node_with_a_chief(monkeypatch: pytest.MonkeyPatch) -> None:
    _setenv(monkeypatch, _step(2, nodelist="n[1-3]", per_node="1(x3)", tasks=3))
    r = SlurmClusterResolver(jobs={"chief": 1, "worker": 2}, gpus_per_node=0)
    plan = r.process_plan(1)
    assert (r.task_type, r.task_id) == ("worker", 1)
    assert (plan.rank, plan.world_size, plan.num_workers, plan.master_addr) == (2, 3, 3, "n1")
    assert plan.task_names == ("chief:0", "worker:0", "worker:1")
