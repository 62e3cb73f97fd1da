"""The processes of a tensor-parallel engine: rank 0 is the engine's own, ranks 1..K-1 start here.

Each worker loads its shard of the model, tells rank 0 how many KV blocks fit beside it, then
runs every step plan rank 0 sends until told to stop. The layers' collectives (torch.distributed:
gloo on CPUs, NCCL on GPUs) keep the ranks in step within a forward pass. Control messages go
over pipes rather than collectives, so a worker whose engine has gone away (closed, crashed,
killed) reads end-of-file and exits instead of waiting forever in a collective.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import weakref
from contextlib import contextmanager
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.distributed as dist

from bulkinfer.engine.resolve import ResolvedConfig
from bulkinfer.engine.step_plan import StepPlan
from bulkinfer.models.config import ModelConfig

WorkerMain = Callable[[int, ResolvedConfig, ModelConfig, Path, str, Connection], None]
_JOIN_SECONDS = 10
_POLL_SECONDS = 0.1
_GROUP_TIMEOUT = timedelta(minutes=5)
_DEATH_SECONDS = 1


def rank_device(device: torch.device, rank: int) -> torch.device:
    """Rank r runs on the r-th GPU after the engine's own; CPU ranks share the CPU."""
    if device.type != "cuda":
        return device
    return torch.device("cuda", (device.index or 0) + rank)


class Workers:
    """Rank 0's handle on the other ranks."""

    def __init__(self, processes: list[multiprocessing.Process], conns: list[Connection]):
        self.processes, self.conns = processes, conns
        self._finalizer = weakref.finalize(self, _shut_down, processes, conns, torch.get_num_threads())

    @classmethod
    def start(cls, config: ResolvedConfig, model_config: ModelConfig, path: Path, worker_main: WorkerMain) -> Workers:
        """Spawn ranks 1..K-1, each running `worker_main(rank, config, model_config, path, address, conn)`."""
        if dist.is_initialized():
            raise ValueError("torch.distributed is already initialized in this process; "
                             "tensor_parallel_size > 1 needs to start its own process group")
        size = config.options.tensor_parallel_size
        if config.device.type == "cuda" and rank_device(config.device, size - 1).index >= torch.cuda.device_count():
            raise ValueError(f"tensor_parallel_size {size} needs {size} GPUs from {config.device}, "
                             f"but only {torch.cuda.device_count()} are visible")
        context = multiprocessing.get_context("spawn")  # CUDA and threads do not survive fork
        address = f"tcp://127.0.0.1:{_free_port()}"
        processes, conns = [], []
        for rank in range(1, size):
            parent_end, child_end = context.Pipe()
            process = context.Process(target=worker_main, name=f"bulkinfer-tp-rank{rank}", daemon=True,
                                      args=(rank, config, model_config, path, address, child_end))
            process.start()
            child_end.close()
            processes.append(process)
            conns.append(parent_end)
        workers = cls(processes, conns)
        try:
            workers.wait_until_started()
            join_process_group(config, 0, address)
        except BaseException:
            workers.close()
            raise
        return workers

    def wait_until_started(self) -> None:
        """Each rank says so once its process runs our code; one that dies first is named at once,
        instead of leaving rank 0 to wait for it in the process group."""
        for rank, (process, conn) in enumerate(zip(self.processes, self.conns), start=1):
            while not conn.poll(_POLL_SECONDS) and process.is_alive():
                pass
            try:
                conn.recv()
            except EOFError:  # it died without a word
                process.join(_DEATH_SECONDS)
                raise RuntimeError(
                    f"tensor-parallel rank {rank} exited while starting (exit code {process.exitcode}). Each rank "
                    f"starts by importing the script that made the LLM: make it under "
                    f"`if __name__ == \"__main__\":`, or the rank runs the whole script again") from None

    def agree_on_blocks(self, blocks_that_fit: int) -> int:
        """The KV pool size every rank can hold: the smallest of the ranks' own counts."""
        counts = [blocks_that_fit]
        for rank, conn in enumerate(self.conns, start=1):
            try:
                kind, value = conn.recv()
            except EOFError:
                raise RuntimeError(f"tensor-parallel rank {rank} exited while loading the model") from None
            if kind == "error":
                raise ValueError(value)
            counts.append(value)
        for conn in self.conns:
            conn.send(min(counts))
        return min(counts)

    def send(self, plan: StepPlan) -> None:
        for conn in self.conns:
            conn.send(plan)

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Name the rank that died when a pipe or a collective fails because of it."""
        try:
            yield
        except (RuntimeError, OSError):
            for rank, process in enumerate(self.processes, start=1):
                process.join(_DEATH_SECONDS)  # a reset connection can come before the exit status
                if process.exitcode is not None:
                    raise RuntimeError(f"tensor-parallel rank {rank} exited (exit code {process.exitcode}); "
                                       f"this engine cannot run any more steps") from None
            raise

    def close(self) -> None:
        self._finalizer()


class Leader:
    """A worker's handle on rank 0."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def agree_on_blocks(self, blocks_that_fit: int) -> int:
        self.conn.send(("ready", blocks_that_fit))
        return self.conn.recv()


def join_process_group(config: ResolvedConfig, rank: int, address: str) -> None:
    """A rank that dies between starting and joining makes the others fail after _GROUP_TIMEOUT, not hang."""
    size = config.options.tensor_parallel_size
    if config.device.type == "cuda":
        torch.cuda.set_device(rank_device(config.device, rank))
    else:  # K processes share the cores: more threads than cores would make every rank wait
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // size))
    dist.init_process_group("nccl" if config.device.type == "cuda" else "gloo", init_method=address,
                            rank=rank, world_size=size, timeout=_GROUP_TIMEOUT)


def _shut_down(processes: list[multiprocessing.Process], conns: list[Connection], threads: int) -> None:
    for conn in conns:
        try:
            conn.send(None)
        except OSError:  # that worker has already exited
            pass
        conn.close()
    for process in processes:
        process.join(_JOIN_SECONDS)
        if process.is_alive():  # stuck in a collective whose peer has gone
            process.kill()
            process.join()
    if dist.is_initialized():
        dist.destroy_process_group()
    torch.set_num_threads(threads)  # join_process_group shared the cores out between the ranks


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
