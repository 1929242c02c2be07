"""Malformed TF_CONFIGs: each raises ConfigError naming the field, the bad value and the fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from distrib.cluster import TFConfigClusterResolver, parse_tf_config
from distrib.errors import ConfigError

W2 = {"worker": ["h0:2222", "h1:2222"]}


def _cfg(cluster: Any = W2, task: Any = ("worker", 0), **extra: Any) -> str:
    config: dict[str, Any] = {"cluster": cluster, **extra}
    if task is not None:
        config["task"] = {"type": task[0], "index": task[1]} if isinstance(task, tuple) else task
    return json.dumps(config)


# (id, TF_CONFIG text, field named, a piece of the value shown, a piece of the fix)
CASES: list[tuple[str, str, str, str, str]] = [
    ("json-truncated", '{"cluster": {"worker": ["h0:2222"]}', "TF_CONFIG",
     "line 1, column 36", "write TF_CONFIG as JSON"),
    ("json-single-quotes", "{'cluster': {'worker': ['h0:2222']}}", "TF_CONFIG",
     "{'cluster'", "JSON needs double quotes"),
    ("json-trailing-comma", '{"cluster": {"worker": ["h0:2222",]}}', "TF_CONFIG",
     "line 1, column 3", "remove the comma before ']'"),  # 3.13's json: 34, earlier: 35
    ("not-an-object", '["h0:2222"]', "TF_CONFIG", "['h0:2222']", "write it like"),
    ("misspelled-key", '{"clutser": {"worker": ["h0:2222"]}}', "TF_CONFIG key 'clutser'",
     "did you mean 'cluster'?", "spell the key"),
    ("cluster-not-dict", _cfg(cluster=["h0:2222"]), "TF_CONFIG cluster", "['h0:2222']",
     '"cluster": {"worker"'),
    ("job-not-list", _cfg(cluster={"worker": "h0:2222"}), "TF_CONFIG cluster['worker']",
     "'h0:2222'", '"worker": ["h0:2222"]'),
    ("empty-job", _cfg(cluster={"worker": ["h0:2222"], "chief": []}),
     "TF_CONFIG cluster['chief']", "[]", "list the addresses of its tasks, or remove the job"),
    ("address-not-string", _cfg(cluster={"worker": ["h0:2222", 2222]}),
     "TF_CONFIG cluster['worker'][1]", "2222", "quoted string"),
    ("no-port", _cfg(cluster={"worker": ["h0", "h1:2222"]}), "TF_CONFIG cluster['worker'][0]",
     "'h0'", "'h0:2222'"),
    ("port-not-numeric", _cfg(cluster={"worker": ["h0:http", "h1:2222"]}),
     "TF_CONFIG cluster['worker'][0]", "'h0:http'", "use a number from 1 to 65535"),
    ("port-too-big", _cfg(cluster={"worker": ["h0:70000", "h1:2222"]}),
     "TF_CONFIG cluster['worker'][0]", "out of range", "use a port from 1 to 65535"),
    ("port-zero", _cfg(cluster={"worker": ["h0:0", "h1:2222"]}),
     "TF_CONFIG cluster['worker'][0]", "'h0:0'", "use a port from 1 to 65535"),
    ("empty-host", _cfg(cluster={"worker": [":2222", "h1:2222"]}),
     "TF_CONFIG cluster['worker'][0]", "the host is empty", "'localhost:2222'"),
    ("scheme-prefix", _cfg(cluster={"worker": ["grpc://h0:2222", "h1:2222"]}),
     "TF_CONFIG cluster['worker'][0]", "'grpc://h0:2222'", "write 'h0:2222'"),
    ("space-in-address", _cfg(cluster={"worker": ["h0: 2222", "h1:2222"]}),
     "TF_CONFIG cluster['worker'][0]", "must not contain spaces", "write 'h0:2222'"),
    ("ipv6-without-brackets", _cfg(cluster={"worker": ["::1:2222", "h1:2222"]}),
     "TF_CONFIG cluster['worker'][0]", "IPv6", "'[::1]:2222'"),
    ("duplicate-in-job", _cfg(cluster={"worker": ["h0:2222", "h0:2222"]}),
     "TF_CONFIG cluster['worker'][1]", "worker:0 and worker:1", "its own host:port"),
    ("duplicate-across-jobs", _cfg(cluster={"chief": ["h0:2222"], "worker": ["H0:2222"]}),
     "TF_CONFIG cluster['worker'][0]", "chief:0 and worker:0", "its own host:port"),
    ("unknown-job", _cfg(cluster={"workers": ["h0:2222"]}), "TF_CONFIG cluster['workers']",
     "did you mean 'worker'?", "name every job 'chief', 'worker', 'ps' or 'evaluator'"),
    ("legacy-master-job", _cfg(cluster={"master": ["h0:2222"], "worker": ["h1:2222"]}),
     "TF_CONFIG cluster['master']", "'master' job", "rename the job to 'chief'"),
    ("two-chiefs", _cfg(cluster={"chief": ["h0:1", "h1:1"], "worker": ["h2:1"]},
                        task=("worker", 0)),
     "TF_CONFIG cluster['chief']", "There must be at most one 'chief'",
     "make the other machines 'worker' tasks"),
    ("two-evaluators", _cfg(cluster={"worker": ["h0:1"], "evaluator": ["h1:1", "h2:1"]}),
     "TF_CONFIG cluster['evaluator']", "at most one 'evaluator' task", "a single evaluator"),
    ("only-ps", _cfg(cluster={"ps": ["h0:1"]}, task=("ps", 0)), "TF_CONFIG cluster",
     "No `worker`, `chief` or `evaluator` tasks can be found", "add the training tasks"),
    ("only-evaluator", _cfg(cluster={"evaluator": ["h0:1"]}, task=("evaluator", 0)),
     "TF_CONFIG cluster", "an evaluator alone", "add the training tasks"),
    ("missing-task", _cfg(task=None), "TF_CONFIG task",
     "you must also specify `task_type` and `task_id`", '"task": {"type": "worker"'),
    ("task-not-object", _cfg(task="worker:0"), "TF_CONFIG task", "'worker:0'",
     '"task": {"type": "worker", "index": 0}'),
    ("missing-type", _cfg(task={"index": 0}), "TF_CONFIG task.type", "must give its 'type'",
     '"type": "worker"'),
    ("missing-index", _cfg(task={"type": "worker", "id": 0}), "TF_CONFIG task.index",
     "it has ['id', 'type']", '"index": 0'),
    ("type-not-string", _cfg(task=(1, 0)), "TF_CONFIG task.type", "1", '"type": "worker"'),
    ("index-not-int", _cfg(task=("worker", "one")), "TF_CONFIG task.index", "'one'",
     '"index": 0'),
    ("index-fraction", _cfg(task=("worker", 1.5)), "TF_CONFIG task.index", "1.5", '"index": 0'),
    ("index-bool", _cfg(task=("worker", True)), "TF_CONFIG task.index", "True", '"index": 0'),
    ("index-negative", _cfg(task=("worker", -1)), "TF_CONFIG task.index", "-1",
     "0-based index"),
    ("index-out-of-range", _cfg(task=("worker", 2)), "TF_CONFIG task.index",
     "The `task_id` 2 exceeds the maximum id of worker", "use an index from 0 to 1"),
    ("unknown-task-type", _cfg(task=("wroker", 0)), "TF_CONFIG task.type",
     "Unrecognized task_type: 'wroker'", "use one of the jobs of the cluster: ['worker']"),
    ("type-absent-from-cluster", _cfg(task=("chief", 0)), "TF_CONFIG task.type",
     "`task_type` 'chief' not found in cluster_spec", "add a 'chief' job to the cluster"),
    ("evaluator-index-1", _cfg(task=("evaluator", 1)), "TF_CONFIG task.index",
     "there can only be one `evaluator` task (with task id 0)", "use index 0"),
    ("task-without-cluster", json.dumps({"task": {"type": "worker", "index": 1}}),
     "TF_CONFIG task", "'index': 1", "add the 'cluster'"),
    ("rpc-layer-not-string", _cfg(rpc_layer=5), "TF_CONFIG rpc_layer", "5",
     '"rpc_layer": "grpc"'),
]


@pytest.mark.parametrize(("text", "field", "value", "fix"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_malformed_tf_config(text: str, field: str, value: str, fix: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_tf_config(text)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith(f"{field} = "), message
    what_and_rule, _, fix_text = message.partition(". Fix: ")
    assert value in what_and_rule, message
    assert fix in fix_text, message


def test_at_least_25_malformed_configurations() -> None:
    assert len(CASES) >= 25


def test_the_resolver_raises_the_same_error(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _cfg(cluster={"worker": ["h0", "h1:2222"]})
    monkeypatch.setenv("TF_CONFIG", text)
    with pytest.raises(ConfigError) as info:
        TFConfigClusterResolver()
    with pytest.raises(ConfigError) as direct:
        parse_tf_config(text)
    assert str(info.value) == str(direct.value)


@pytest.mark.parametrize("cluster", [
    {"chief": ["h0:1"], "worker": ["h1", "h2:1"]},
    {"chief": ["h0:1"], "worker": ["h1:1", "h1:1"]},
    {"chief": ["h0:1", "h3:1"], "worker": ["h1:1", "h2:1"]},
    {"chief": ["h0:1"], "worker": ["h1:1"], "evaluator": ["h2:1", "h3:1"]},
], ids=["no-port", "duplicate", "two-chiefs", "two-evaluators"])
def test_cluster_errors_are_identical_on_every_task(cluster: dict[str, list[str]]) -> None:
    messages = set()
    for job, addresses in cluster.items():
        for index in range(len(addresses)):
            with pytest.raises(ConfigError) as info:
                parse_tf_config(_cfg(cluster=cluster, task=(job, index)))
            messages.add(str(info.value))
    assert len(messages) == 1, messages


def test_ps_task_asking_for_a_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", _cfg(cluster={"worker": ["h0:1"], "ps": ["h1:1"]},
                                         task=("ps", 0)))
    resolver = TFConfigClusterResolver()  # a valid cluster ...
    with pytest.raises(ConfigError) as info:
        resolver.process_plan(1)          # ... but no strategy can use a ps task
    message = str(info.value)
    assert message.startswith("TF_CONFIG task.type = 'ps:0'")
    assert "only ParameterServerStrategy has ps tasks" in message
    assert "Fix: create distrib.ParameterServerStrategy()" in message
