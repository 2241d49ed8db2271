"""A small value many tasks read (:func:`spectral.placement.shared_value`) survives the death of the worker holding
it: a real SIGKILL to that worker's process; a scattered value, the former way, is lost with it."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from eigenflow.spectral.placement import shared_value


def _total(value: np.ndarray) -> float:
    return float(np.sum(value))


def _kill_holder(client, future) -> None:
    """SIGKILL the process of the (one) worker holding ``future``'s value; wait until the scheduler removed it."""
    [address] = client.who_has([future])[future.key]
    os.kill(client.run(os.getpid, workers=[address])[address], signal.SIGKILL)
    deadline = time.time() + 60
    while address in client.scheduler_info(n_workers=-1)["workers"]:
        assert time.time() < deadline, "the scheduler did not remove the killed worker"
        time.sleep(0.2)


@pytest.mark.timeout(300)
def test_a_shared_value_is_computed_again_when_its_worker_dies():
    from distributed import Client

    from tests.helpers import local_cluster

    value = np.arange(100_000, dtype=np.int64)
    with local_cluster(n_workers=2) as address, Client(address) as client:
        shared = shared_value(client, value)
        assert client.submit(_total, shared, pure=False).result() == value.sum()
        _kill_holder(client, shared)
        assert client.submit(_total, shared, pure=False).result(timeout=120) == value.sum()
        np.testing.assert_array_equal(shared.result(), value)

        scattered = client.scatter(value, hash=False)  # the former way: no task can make it again
        _kill_holder(client, scattered)
        with pytest.raises(Exception):
            client.submit(_total, scattered, pure=False).result(timeout=120)
