"""CPU priority of side work (:mod:`tasks._priority`): real threads and a real child process, nice values read
back from the kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from eigenflow.tasks._priority import SIDE_WORK_NICENESS, call_at_lower_priority, lower_process_priority, lower_thread_priority
from tests.helpers import nice_of_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def own_nice() -> int:
    return nice_of_thread(threading.get_native_id())


def test_a_lowered_thread_keeps_its_niceness_and_the_others_keep_theirs():
    """The thread that lowers itself gets the value (a thread it starts inherits it); a nicer value is not
    raised back; the caller's thread is untouched."""
    before = own_nice()
    seen: dict[str, int] = {}

    def side() -> None:
        lower_thread_priority(SIDE_WORK_NICENESS)
        seen["side"] = own_nice()
        child = threading.Thread(target=lambda: seen.__setitem__("child", own_nice()))
        child.start()
        child.join()
        lower_thread_priority(SIDE_WORK_NICENESS - 5)  # never raised back
        seen["after"] = own_nice()

    thread = threading.Thread(target=side)
    thread.start()
    thread.join()
    expected = max(before, SIDE_WORK_NICENESS)
    assert seen == {"side": expected, "child": expected, "after": expected}
    assert own_nice() == before


def test_a_call_at_lower_priority_runs_in_a_nicer_thread_and_returns_or_raises():
    before = own_nice()
    caller = threading.get_native_id()
    result = call_at_lower_priority(lambda a, b: (threading.get_native_id(), own_nice(), a + b), 2, 3)
    tid, nice, total = result
    assert total == 5 and tid != caller and nice == max(before, SIDE_WORK_NICENESS)
    assert own_nice() == before

    def fails() -> None:
        raise KeyError("side work failed")

    with pytest.raises(KeyError, match="side work failed"):
        call_at_lower_priority(fails)


def test_a_child_process_is_lowered_and_an_ended_one_is_left_alone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        lower_process_priority(child.pid, SIDE_WORK_NICENESS)
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == max(os.getpriority(os.PRIO_PROCESS, 0),
                                                                  SIDE_WORK_NICENESS)
    finally:
        child.kill()
        child.wait()
    lower_process_priority(child.pid, SIDE_WORK_NICENESS)  # reaped: no such process, no error
