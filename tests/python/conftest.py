# SPDX-License-Identifier: Apache-2.0
import os
import sys

# One torch thread in every test process and the programs the tests start (torchrun already sets
# this for its ranks): the tensors are tiny, and the tests share the cores with each other, where
# a second thread spinning for work costs many times the compute (a dense baseline of 50 steps:
# 6 s of CPU on one thread, over 60 on two beside another test process).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# The helpers (worlds, reference, dist_cases) and the examples' model are imported by name, here and
# in the ranks' processes (which get the same sys.path).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))


@pytest.fixture(scope="session", autouse=True)
def _worlds_shared_by_workers(tmp_path_factory):
    """Under pytest-xdist the workers share one directory of the session's temporary folder, where
    a world that several tests read runs once for all (worlds.run_world_once)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import worlds
        worlds.share_results_in(tmp_path_factory.getbasetemp().parent / "worlds")


def pytest_configure(config):
    """pytest-xdist hands out tests one at a time (--maxschedchunk 1) unless told otherwise: its
    first hand-out is otherwise a quarter of each worker's share, which would give one worker all
    the long tests that pytest_collection_modifyitems puts first."""
    if getattr(config.option, "maxschedchunk", "no xdist") is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(items):
    """Tests marked seconds(n) (about n seconds on one core of the 2-core CI machine) run first,
    longest first; the others keep their order. With pytest-xdist the long tests then spread over
    the workers from the start and the short ones fill the end, where a long test last on one
    worker would leave the other cores idle."""
    def seconds(item):
        marker = item.get_closest_marker("seconds")
        return marker.args[0] if marker else 0
    items.sort(key=seconds, reverse=True)  # stable: equal keys keep their order
