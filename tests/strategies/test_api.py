"""Single-process checks of the strategy API: contexts, run, reduce, the default
and one-device strategies."""

from __future__ import annotations

import copy

import pytest
import torch

import distrib
from distrib.errors import ContextError, InvalidTypeError, UsageError


def test_contexts_outside_and_inside_scope() -> None:
    assert distrib.get_replica_context() is not None
    assert not distrib.in_cross_replica_context()
    s = distrib.OneDeviceStrategy("cpu:0")
    with s.scope():
        assert distrib.get_replica_context() is None
        assert distrib.in_cross_replica_context()
        assert distrib.get_strategy() is s
    inside = s.run(lambda: distrib.get_replica_context())
    assert isinstance(inside, distrib.ReplicaContext)
    assert not distrib.in_cross_replica_context()


def test_has_strategy_and_mixing_scopes_raises() -> None:
    a, b = distrib.OneDeviceStrategy("cpu:0"), distrib.OneDeviceStrategy("cpu:0")
    assert not distrib.has_strategy()
    with a.scope():
        assert distrib.has_strategy()
        with a.scope():  # re-entering the same scope is allowed
            assert distrib.get_strategy() is a
        with pytest.raises(RuntimeError, match="Mixing different tf.distribute.Strategy"):
            with b.scope():
                pass
    assert not distrib.has_strategy()


def test_default_scope_cannot_be_nested() -> None:
    default = distrib.get_strategy()
    with default.scope(), pytest.raises(RuntimeError, match="Must not nest"):
        with distrib.OneDeviceStrategy("cpu:0").scope():
            pass


def test_run_args_must_be_a_list_or_tuple() -> None:
    s = distrib.get_strategy()
    with pytest.raises(ValueError, match="positional args must be a list or tuple"):
        s.run(lambda x: x, args=torch.tensor(1.0))
    assert s.run(lambda x: x + 1, args=[torch.tensor(1.0)]) == 2


def test_reduce_op_accepts_strings_and_rejects_other_objects() -> None:
    s = distrib.get_strategy()
    assert s.reduce("sum", torch.tensor([1.0, 2.0]), axis=0) == 3.0
    with pytest.raises(ValueError, match="reduce_op = 'max'"):
        s.reduce("max", torch.tensor(1.0), axis=None)
    with pytest.raises(TypeError, match="Expected `reduce_op` to be a `tf.distribute.ReduceOp`"):
        s.reduce(object(), torch.tensor([1.0]), axis=0)  # type: ignore[arg-type]
    assert isinstance(UsageError("x"), ValueError) and isinstance(InvalidTypeError("x"), TypeError)


def test_axis_out_of_range() -> None:
    with pytest.raises(ValueError, match="out of range for `value` with rank 1"):
        distrib.get_strategy().reduce("sum", torch.ones(3), axis=1)


def test_one_device_docstring_examples() -> None:
    s = distrib.OneDeviceStrategy("/cpu:0")
    assert torch.equal(s.reduce("sum", torch.arange(10), axis=None), torch.arange(10))
    assert s.reduce("sum", torch.arange(10), axis=0) == 45
    total = sum(s.run(lambda x: x * 2, args=(torch.tensor(i),)) for i in range(10))
    assert total == 90
    assert s.experimental_local_results(torch.tensor(3)) == (torch.tensor(3),)
    assert s.num_replicas_in_sync == 1 and s.extended.worker_devices == ("cpu:0",)


def test_default_strategy_properties() -> None:
    s = distrib.get_strategy()
    assert s.num_replicas_in_sync == 1
    assert s.extended.should_checkpoint and s.extended.should_save_summary
    with pytest.raises(RuntimeError, match="worker_devices\\(\\) method unsupported"):
        _ = s.extended.worker_devices
    with pytest.raises(RuntimeError, match="single instance"):
        copy.deepcopy(s)
    with pytest.raises(RuntimeError, match="Must only deepcopy"):
        copy.copy(s)
    ds = [1, 2, 3]
    assert s.experimental_distribute_dataset(ds) is ds


def test_gather_requires_cross_replica_context() -> None:
    s = distrib.OneDeviceStrategy("cpu:0")
    with pytest.raises(ContextError, match="use get_replica_context\\(\\).all_gather"):
        s.run(lambda: s.gather(torch.ones(2), axis=0))
    assert torch.equal(s.gather(torch.ones(2), axis=0), torch.ones(2))


def test_merge_call_on_one_replica() -> None:
    s = distrib.OneDeviceStrategy("cpu:0")
    assert s.run(lambda: distrib.get_replica_context().merge_call(lambda st: 11) + 1) == 12


def test_all_reduce_single_replica_returns_tensors() -> None:
    ctx = distrib.get_replica_context()
    assert ctx is not None
    assert ctx.all_reduce("sum", 1.0) == torch.tensor(1.0)
    assert ctx.num_replicas_in_sync == 1 and int(ctx.replica_id_in_sync_group) == 0


def test_mirrored_device_validation() -> None:
    with pytest.raises(ValueError, match="No duplicates allowed in `devices` argument"):
        distrib.MirroredStrategy(devices=["cpu:0", "cpu:0"])
    with pytest.raises(ValueError, match="each device must look like"):
        distrib.MirroredStrategy(devices=["tpu:0"])
    with pytest.raises(ValueError, match="communication_options must be an instance"):
        distrib.MirroredStrategy(communication_options="ring")  # type: ignore[arg-type]


def test_mirrored_one_cpu_is_a_single_replica() -> None:
    s = distrib.MirroredStrategy()
    assert s.num_replicas_in_sync == 1
    assert isinstance(s.run(lambda: torch.tensor(1.0)), distrib.PerReplica)


def test_communication_options_validation() -> None:
    assert distrib.CommunicationOptions(implementation="ring").implementation \
        is distrib.CommunicationImplementation.RING
    with pytest.raises(ValueError, match="bytes_per_pack must be non-negative"):
        distrib.CommunicationOptions(bytes_per_pack=-1)
    with pytest.raises(ValueError, match="implementation = 'mpi'"):
        distrib.CommunicationOptions(implementation="mpi")
    with pytest.raises(ValueError, match="timeout_seconds"):
        distrib.CommunicationOptions(timeout_seconds=0)
    base = distrib.CommunicationOptions(timeout_seconds=5)
    merged = base.merge(distrib.CommunicationOptions(implementation="nccl"))
    assert merged.timeout_seconds == 5
    assert merged.implementation is distrib.CommunicationImplementation.NCCL


def test_compute_average_loss() -> None:
    per_example = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert distrib.compute_average_loss(per_example, global_batch_size=8) == 1.25
    assert distrib.compute_average_loss(per_example) == 2.5
    assert distrib.compute_average_loss(per_example, sample_weight=2.0,
                                        global_batch_size=4) == 5.0
    with pytest.raises(ValueError, match="global_batch_size = 0"):
        distrib.compute_average_loss(per_example, global_batch_size=0)


def test_values_from_function_and_repr() -> None:
    s = distrib.MirroredStrategy()
    v = s.experimental_distribute_values_from_function(
        lambda ctx: ctx.replica_id_in_sync_group + 10)
    assert s.experimental_local_results(v) == (10,)
    assert repr(v).startswith("PerReplica:{\n  0: 10")
    assert repr(distrib.ValueContext(2, 4)).startswith("distrib.ValueContext(replica id 2")


def test_modules_created_in_one_device_scope_stay_plain() -> None:
    s = distrib.OneDeviceStrategy("cpu:0")
    with s.scope():
        net = torch.nn.Linear(2, 2)
    assert type(net) is torch.nn.Linear


def test_a_step_runner_runs_a_step_as_call_for_each_replica_does() -> None:
    s = distrib.OneDeviceStrategy("cpu:0")

    def fn(a: int, b: int) -> tuple[int, int, bool]:
        ctx = distrib.get_replica_context()
        assert ctx is not None
        return a + b, ctx.global_batch_size(3), distrib.in_cross_replica_context()

    with s.scope():
        run = s.extended.step_runner(fn)
        assert run((1, 2), 8) == (3, 8, False)  # the step's count, as given
        assert run((1, 2)) == (3, 3, False)  # none given: summed over the replicas (one)
        assert s.extended.call_for_each_replica(fn, (1, 2), global_batch_size=8) == run((1, 2), 8)
        assert distrib.in_cross_replica_context()  # the replica context ends with the step
        with pytest.raises(ZeroDivisionError):
            s.extended.step_runner(lambda: 1 / 0)(())
        assert distrib.in_cross_replica_context()  # also when the step raised
    with distrib.OneDeviceStrategy("cpu:0").scope(), \
            pytest.raises(RuntimeError, match="Mixing different tf.distribute.Strategy"):
        run((1, 2), 8)


def test_every_strategy_that_runs_steps_its_own_way_prepares_them_its_own_way() -> None:
    from distrib.strategies.extended import StrategyExtended

    def subclasses(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    for cls in subclasses(StrategyExtended):
        own_run = "_call_for_each_replica" in cls.__dict__
        assert own_run <= ("_step_runner" in cls.__dict__), cls.__name__
