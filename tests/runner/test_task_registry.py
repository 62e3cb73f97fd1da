"""The task registry and JobConfig's task choices name the same tasks, in the same order."""

from bulkinfer.runner.config import TASK_NAMES, JobConfig
from bulkinfer.runner.tasks import TASKS
from bulkinfer.settings import settings_of


def test_registry_and_job_settings_name_the_same_tasks() -> None:
    [task] = [s for s in settings_of(JobConfig) if s.name == "task"]
    assert tuple(TASKS) == TASK_NAMES == tuple(task.choices)
