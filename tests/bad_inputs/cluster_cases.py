"""Bad cluster configurations: TF_CONFIG, resolvers, ClusterSpec, torchrun/SLURM/local variables.

Every TF_CONFIG case goes through ``distrib.MultiWorkerMirroredStrategy()`` (the public
path that reads the environment), with a short timeout so that a case that were valid
by mistake would fail fast instead of waiting for peers.
"""

from __future__ import annotations

from typing import Any

import distrib
from distrib.cluster import ClusterSpec, SimpleClusterResolver
from distrib.errors import ConfigError, InvalidTypeError
from tests.bad_inputs.case import Case, tf_config

FAST = distrib.CommunicationOptions(timeout_seconds=2)
W2 = {"worker": ["h0:2222", "h1:2222"]}


def mwms() -> Any:
    return distrib.MultiWorkerMirroredStrategy(communication_options=FAST)


def with_tf_config(id: str, text: str, says: list[str]) -> Case:
    return Case(id, mwms, ConfigError, says, env={"TF_CONFIG": text})


def with_resolver(id: str, spec: Any, task_type: Any, task_id: Any, says: list[str]) -> Case:
    def call() -> Any:
        resolver = SimpleClusterResolver(spec, task_type=task_type, task_id=task_id)
        return distrib.MultiWorkerMirroredStrategy(resolver, FAST)
    return Case(id, call, ConfigError, says)


def torchrun_env(**changes: str | None) -> dict[str, str]:
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for name, value in changes.items():
        if value is None:
            del env[name]
        else:
            env[name] = value
    return env


def slurm_env(**changes: str) -> dict[str, str]:
    return {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "n[1-2]",
            "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURMD_NODENAME": "n1", **changes}


TF_CONFIG_CASES = [
    with_tf_config("tf-config-truncated-json", '{"cluster": {"worker": ["h0:2222"]}',
                   ["TF_CONFIG = ", "line 1, column 36", "write TF_CONFIG as JSON"]),
    with_tf_config("tf-config-single-quotes", "{'cluster': {'worker': ['h0:2222']}}",
                   ["{'cluster'", "double quotes"]),
    with_tf_config("tf-config-trailing-comma", '{"cluster": {"worker": ["h0:2222",]}}',
                   ["line 1, column 3", "remove the comma"]),  # 34 on 3.13, else 35
    with_tf_config("tf-config-a-list", '["h0:2222"]', ["['h0:2222']"]),
    with_tf_config("tf-config-a-number", "5", ["TF_CONFIG = 5", "JSON object"]),
    with_tf_config("tf-config-misspelled-cluster", '{"clutser": {"worker": ["h0:2222"]}}',
                   ["'clutser'", "did you mean 'cluster'?"]),
    with_tf_config("tf-config-cluster-a-list", tf_config(["h0:2222"]),
                   ["TF_CONFIG cluster = ['h0:2222']"]),
    with_tf_config("tf-config-job-a-string", tf_config({"worker": "h0:2222"}),
                   ["cluster['worker'] = 'h0:2222'"]),
    with_tf_config("tf-config-empty-job", tf_config({"worker": ["h0:2222"], "chief": []}),
                   ["cluster['chief'] = []", "remove the job"]),
    with_tf_config("tf-config-address-a-number", tf_config({"worker": ["h0:2222", 2222]}),
                   ["cluster['worker'][1] = 2222", "quoted string"]),
    with_tf_config("tf-config-no-port", tf_config({"worker": ["h0", "h1:2222"]}),
                   ["cluster['worker'][0] = 'h0'", "'h0:2222'"]),
    with_tf_config("tf-config-port-a-word", tf_config({"worker": ["h0:http", "h1:2222"]}),
                   ["'h0:http'", "1 to 65535"]),
    with_tf_config("tf-config-port-too-big", tf_config({"worker": ["h0:70000", "h1:2222"]}),
                   ["'h0:70000'", "1 to 65535"]),
    with_tf_config("tf-config-port-zero", tf_config({"worker": ["h0:0", "h1:2222"]}),
                   ["'h0:0'", "1 to 65535"]),
    with_tf_config("tf-config-empty-host", tf_config({"worker": [":2222", "h1:2222"]}),
                   ["':2222'", "the host is empty"]),
    with_tf_config("tf-config-scheme-prefix", tf_config({"worker": ["grpc://h0:2222", "h1:1"]}),
                   ["'grpc://h0:2222'", "write 'h0:2222'"]),
    with_tf_config("tf-config-space-in-address", tf_config({"worker": ["h0: 2222", "h1:1"]}),
                   ["'h0: 2222'", "must not contain spaces"]),
    with_tf_config("tf-config-bare-ipv6", tf_config({"worker": ["::1:2222", "h1:2222"]}),
                   ["'::1:2222'", "'[::1]:2222'"]),
    with_tf_config("tf-config-duplicate-address", tf_config({"worker": ["h0:2222", "h0:2222"]}),
                   ["'h0:2222'", "worker:0 and worker:1"]),
    with_tf_config("tf-config-duplicate-across-jobs",
                   tf_config({"chief": ["h0:2222"], "worker": ["H0:2222"]}),
                   ["chief:0 and worker:0"]),
    with_tf_config("tf-config-localhost-and-loopback",
                   tf_config({"worker": ["localhost:2222", "127.0.0.1:2222"]}),
                   ["'127.0.0.1:2222'", "worker:0 and worker:1", "its own host:port"]),
    with_tf_config("tf-config-ipv6-loopback-and-localhost",
                   tf_config({"chief": ["[::1]:2222"], "worker": ["LOCALHOST:2222"]}),
                   ["'LOCALHOST:2222'", "chief:0 and worker:0"]),
    with_tf_config("tf-config-two-ipv6-spellings",
                   tf_config({"worker": ["[0:0::1]:2222", "[::1]:2222"]}),
                   ["'[::1]:2222'", "worker:0 and worker:1"]),
    with_tf_config("tf-config-ipv4-mapped-ipv6",
                   tf_config({"worker": ["10.0.0.1:2222", "[::ffff:10.0.0.1]:2222"]}),
                   ["'[::ffff:10.0.0.1]:2222'", "the same address is given to two tasks"]),
    with_tf_config("tf-config-unknown-job", tf_config({"workers": ["h0:2222"]}),
                   ["cluster['workers']", "did you mean 'worker'?"]),
    with_tf_config("tf-config-master-job", tf_config({"master": ["h0:1"], "worker": ["h1:1"]}),
                   ["cluster['master']", "rename the job to 'chief'"]),
    with_tf_config("tf-config-two-chiefs",
                   tf_config({"chief": ["h0:1", "h1:1"], "worker": ["h2:1"]}),
                   ["cluster['chief']", "at most one 'chief'"]),
    with_tf_config("tf-config-two-evaluators",
                   tf_config({"worker": ["h0:1"], "evaluator": ["h1:1", "h2:1"]}),
                   ["cluster['evaluator']", "at most one 'evaluator'"]),
    with_tf_config("tf-config-only-ps", tf_config({"ps": ["h0:1"]}, "ps"),
                   ["No `worker`, `chief` or `evaluator` tasks"]),
    with_tf_config("tf-config-only-evaluator", tf_config({"evaluator": ["h0:1"]}, "evaluator"),
                   ["an evaluator alone"]),
    with_tf_config("tf-config-no-task", tf_config(W2, None),
                   ["TF_CONFIG task", "`task_type` and `task_id`"]),
    with_tf_config("tf-config-task-a-string",
                   '{"cluster": {"worker": ["h0:1"]}, "task": "worker:0"}',
                   ["'worker:0'", '"task": {"type": "worker", "index": 0}']),
    with_tf_config("tf-config-task-without-type",
                   '{"cluster": {"worker": ["h0:1"]}, "task": {"index": 0}}',
                   ["TF_CONFIG task.type", "must give its 'type'"]),
    with_tf_config("tf-config-task-id-not-index",
                   '{"cluster": {"worker": ["h0:1"]}, "task": {"type": "worker", "id": 0}}',
                   ["TF_CONFIG task.index", "['id', 'type']"]),
    with_tf_config("tf-config-type-a-number", tf_config(W2, 1), ["TF_CONFIG task.type = 1"]),
    with_tf_config("tf-config-index-a-word", tf_config(W2, "worker", "one"),
                   ["TF_CONFIG task.index = 'one'"]),
    with_tf_config("tf-config-index-a-fraction", tf_config(W2, "worker", 1.5),
                   ["TF_CONFIG task.index = 1.5"]),
    with_tf_config("tf-config-index-a-bool", tf_config(W2, "worker", True),
                   ["TF_CONFIG task.index = True"]),
    with_tf_config("tf-config-index-negative", tf_config(W2, "worker", -1),
                   ["TF_CONFIG task.index = -1", "0-based index"]),
    with_tf_config("tf-config-index-too-big", tf_config(W2, "worker", 2),
                   ["TF_CONFIG task.index = 2", "use an index from 0 to 1"]),
    with_tf_config("tf-config-misspelled-type", tf_config(W2, "wroker"),
                   ["'wroker'", "['worker']"]),
    with_tf_config("tf-config-type-not-in-cluster", tf_config(W2, "chief"),
                   ["'chief' not found in cluster_spec", "add a 'chief' job"]),
    with_tf_config("tf-config-second-evaluator",
                   tf_config({"worker": ["h0:1"], "evaluator": ["h1:1"]}, "evaluator", 1),
                   ["TF_CONFIG task.index = 1", "only be one `evaluator`"]),
    with_tf_config("tf-config-task-without-cluster",
                   '{"task": {"type": "worker", "index": 1}}', ["'index': 1", "'cluster'"]),
    with_tf_config("tf-config-rpc-layer-a-number", tf_config(W2, rpc_layer=5),
                   ["TF_CONFIG rpc_layer = 5"]),
    with_tf_config("tf-config-ps-task", tf_config({"worker": ["h0:1"], "ps": ["h1:1"]}, "ps"),
                   ["'ps:0'", "only ParameterServerStrategy has ps tasks"]),
    with_tf_config("tf-config-chief-address-not-on-this-machine",
                   tf_config({"worker": ["192.0.2.1:2222", "127.0.0.1:2223"]}),
                   ["'192.0.2.1:2222'", "an address of this machine"]),
]

RESOLVER_CASES = [
    with_resolver("resolver-misspelled-type", {"worker": ["h0:1"]}, "wroker", 0,
                  ["task_type = 'wroker'", "did you mean 'worker'?"]),
    with_resolver("resolver-id-too-big", {"worker": ["h0:1"]}, "worker", 4,
                  ["task_id = 4", "use index 0"]),
    with_resolver("resolver-id-a-string", {"worker": ["h0:1"]}, "worker", "0",
                  ["task_id = '0'", "non-negative integer"]),
    with_resolver("resolver-no-port", {"worker": ["h0", "h1:1"]}, "worker", 0,
                  ["cluster_spec['worker'][0] = 'h0'", "'h0:2222'"]),
    with_resolver("resolver-no-task", {"worker": ["h0:1", "h1:1"]}, None, None,
                  ["task_type = None", "task_type='worker', task_id=0"]),
    with_resolver("resolver-ps-task", {"worker": ["h0:1"], "ps": ["h1:1"]}, "ps", 0,
                  ["'ps:0'", "remove the 'ps' job"]),
    Case("resolver-a-string", lambda: distrib.MultiWorkerMirroredStrategy("TF_CONFIG"),
         ValueError, ["cluster_resolver = 'TF_CONFIG'", "TFConfigClusterResolver()"]),
    Case("cluster-spec-a-number", lambda: ClusterSpec(5), InvalidTypeError,
         ["cluster = 5", "{'worker': ['host0:2222']}"]),
    Case("cluster-spec-a-string", lambda: ClusterSpec("worker:h0:1"), InvalidTypeError,
         ["cluster = 'worker:h0:1'"]),
    Case("cluster-spec-job-a-number", lambda: ClusterSpec({"worker": 5}), InvalidTypeError,
         ["cluster['worker'] = 5"]),
    Case("cluster-spec-index-a-word", lambda: ClusterSpec({"worker": {"a": "h0:1"}}),
         InvalidTypeError, ["task index = 'a'"]),
    Case("cluster-spec-missing-index",
         lambda: ClusterSpec({"worker": ["h0:1"]}).task_address("worker", 3), ConfigError,
         ["task index = 3", "use one of [0]"]),
    Case("cluster-spec-missing-job", lambda: ClusterSpec({"worker": ["h0:1"]}).job_tasks("chief"),
         ConfigError, ["job = 'chief'", "use one of ['worker']"]),
]

ENVIRONMENT_CASES = [
    Case("torchrun-rank-a-word", mwms, ConfigError, ["RANK = 'abc'", "distrib run"],
         env=torchrun_env(RANK="abc")),
    Case("torchrun-rank-too-big", mwms, ConfigError, ["RANK = 5", "[0, WORLD_SIZE=2)"],
         env=torchrun_env(RANK="5")),
    Case("torchrun-world-size-zero", mwms, ConfigError, ["WORLD_SIZE = 0", "at least 1"],
         env=torchrun_env(WORLD_SIZE="0")),
    Case("torchrun-no-master-addr", mwms, ConfigError, ["MASTER_ADDR = None"],
         env=torchrun_env(MASTER_ADDR=None, MASTER_PORT=None)),
    Case("torchrun-port-a-word", mwms, ConfigError, ["MASTER_PORT = 'x'"],
         env=torchrun_env(MASTER_PORT="x")),
    Case("torchrun-local-rank-too-big", mwms, ConfigError, ["LOCAL_RANK = 3"],
         env=torchrun_env(LOCAL_RANK="3", LOCAL_WORLD_SIZE="2")),
    Case("torchrun-rank-alone", mwms, ConfigError, ["WORLD_SIZE = None", "unset RANK"],
         env={"RANK": "0"}),
    Case("slurm-procid-a-word", mwms, ConfigError, ["SLURM_PROCID = 'x'", "let srun set it"],
         env=slurm_env(SLURM_PROCID="x")),
    Case("slurm-nodelist-unclosed", mwms, ConfigError,
         ["SLURM_STEP_NODELIST = 'n[1-'", "a '[' is not closed"],
         env=slurm_env(SLURM_STEP_NODELIST="n[1-")),
    Case("slurm-tasks-per-node-garbled", mwms, ConfigError,
         ["SLURM_STEP_TASKS_PER_NODE = '1(xx2)'"],
         env=slurm_env(SLURM_STEP_TASKS_PER_NODE="1(xx2)")),
    Case("slurm-task-count-mismatch", mwms, ConfigError, ["SLURM_STEP_NUM_TASKS=3"],
         env=slurm_env(SLURM_STEP_NUM_TASKS="3")),
    Case("slurm-procid-too-big", mwms, ConfigError, ["SLURM_PROCID = 7"],
         env=slurm_env(SLURM_PROCID="7")),
    Case("local-rank-a-word", lambda: distrib.MirroredStrategy(["cpu:0", "cpu:1"], None, FAST),
         ConfigError, ["DISTRIB_LOCAL_RANK = 'x'", "unset it"],
         env={"DISTRIB_LOCAL_RANK": "x", "DISTRIB_LOCAL_WORLD_SIZE": "2"}),
    Case("local-rank-out-of-range",
         lambda: distrib.MirroredStrategy(["cpu:0", "cpu:1"], None, FAST), ConfigError,
         ["DISTRIB_LOCAL_RANK = 5"],
         env={"DISTRIB_LOCAL_RANK": "5", "DISTRIB_LOCAL_WORLD_SIZE": "2"}),
    Case("local-replicas-other-devices",
         lambda: distrib.MirroredStrategy(["cpu:0", "cpu:1"], None, FAST), ConfigError,
         ["number of local devices = 2", "one of 3 local replicas"],
         env={"DISTRIB_LOCAL_RANK": "1", "DISTRIB_LOCAL_WORLD_SIZE": "3",
              "DISTRIB_MASTER_PORT": "1"}),
    Case("local-replica-without-port",
         lambda: distrib.MirroredStrategy(["cpu:0", "cpu:1"], None, FAST), ConfigError,
         ["DISTRIB_MASTER_PORT = None"],
         env={"DISTRIB_LOCAL_RANK": "1", "DISTRIB_LOCAL_WORLD_SIZE": "2"}),
]

CASES = [*TF_CONFIG_CASES, *RESOLVER_CASES, *ENVIRONMENT_CASES]
