"""Cancel-previous and stale-version aborts of in-flight completion jobs."""

from __future__ import annotations

import asyncio

import pytest

from lsp_server.errors import StaleRequest, Superseded
from lsp_server.jobs import CompletionJobs


async def _hold(jobs: CompletionJobs, uri: str, version: int, started: asyncio.Event):
    async with jobs.run(uri, version):
        started.set()
        await asyncio.sleep(60)
    return "finished"


async def test_a_newer_job_for_the_same_document_supersedes_the_older():
    jobs = CompletionJobs()
    started = asyncio.Event()
    old = asyncio.ensure_future(_hold(jobs, "u", 1, started))
    await started.wait()
    async with jobs.run("u", 1) as job:
        assert jobs.live("u") is job
    with pytest.raises(Superseded, match="superseded"):
        await old
    assert jobs.superseded == 1 and jobs.live("u") is None


async def test_other_documents_are_independent():
    jobs = CompletionJobs()
    started = asyncio.Event()
    other = asyncio.ensure_future(_hold(jobs, "a", 1, started))
    await started.wait()
    async with jobs.run("b", 1):
        pass
    assert not other.done()
    other.cancel()
    with pytest.raises(asyncio.CancelledError):
        await other


async def test_a_change_to_a_newer_version_or_close_makes_the_job_stale():
    jobs = CompletionJobs()
    for new_version in (5, None):
        started = asyncio.Event()
        task = asyncio.ensure_future(_hold(jobs, "u", 4, started))
        await started.wait()
        jobs.document_changed("u", 4)  # same version: nothing happens
        await asyncio.sleep(0)
        assert not task.done()
        jobs.document_changed("u", new_version)
        with pytest.raises(StaleRequest, match=f"version 4, now {new_version}"):
            await task
    assert jobs.stale == 2


async def test_a_client_cancel_stays_a_plain_cancellation():
    jobs = CompletionJobs()
    started = asyncio.Event()
    task = asyncio.ensure_future(_hold(jobs, "u", 1, started))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert jobs.live("u") is None


async def test_channels_of_one_document_do_not_supersede_each_other_but_both_go_stale():
    jobs = CompletionJobs()
    started_a, started_b = asyncio.Event(), asyncio.Event()
    inline = asyncio.ensure_future(_hold(jobs, "u", 1, started_a))

    async def items():
        async with jobs.run("u", 1, channel="items"):
            started_b.set()
            await asyncio.sleep(60)

    listed = asyncio.ensure_future(items())
    await asyncio.gather(started_a.wait(), started_b.wait())
    assert not inline.done()
    jobs.document_changed("u", 2)
    for task in (inline, listed):
        with pytest.raises(StaleRequest):
            await task
