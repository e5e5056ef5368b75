"""Memory measurement: the tensor tracker, the per-phase figures and what a run writes."""

from __future__ import annotations

import json
import logging
import warnings

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from recipes_lib.memory.monitor import MemoryMonitor
from recipes_lib.memory.tensors import TensorMemoryTracker, storage_bytes, weight_tensors
from recipes_lib.modeling.optimizers import optimizer_state_tensors
from recipes_lib.units import GIB
from tests.helpers.runs import QUICK, run_args, run_in_process


def _model_and_batch(vocab_size=100, hidden=32, rows=4, length=16, dropout=0.1):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=4 * hidden,
        max_position_embeddings=64,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    model = BertForSequenceClassification(config).train()
    batch = {
        "input_ids": torch.randint(0, vocab_size, (rows, length)),
        "attention_mask": torch.ones(rows, length, dtype=torch.long),
        "labels": torch.randint(0, 2, (rows,)),
    }
    return model, batch


def _training_step(model, optimizer, batch):
    model(**batch).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()


def test_tracker_finds_the_same_peak_as_pytorchs_own_mem_tracker():
    """PyTorch's MemTracker (torch.distributed._tools) counts the same storages; the peaks must agree."""
    from torch.distributed._tools.mem_tracker import MemTracker

    model, batch = _model_and_batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _training_step(model, optimizer, batch)  # optimizer state exists from here on
    ours = TensorMemoryTracker(model, optimizer, batch)
    torch.manual_seed(1)
    with ours:
        _training_step(model, optimizer, batch)
    theirs = MemTracker()
    theirs.track_external(model, optimizer, batch)
    torch.manual_seed(1)
    # MemTracker warns about modules freed before their backward hook runs; not what is tested here.
    with warnings.catch_warnings(), theirs:
        warnings.simplefilter("ignore")
        _training_step(model, optimizer, batch)
    their_peak = sum(snapshot["Total"] for snapshot in theirs.get_tracker_snapshot("peak").values())
    assert ours.peak_total == their_peak


def test_each_kind_is_what_the_tensors_hold():
    model, batch = _model_and_batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    _training_step(model, optimizer, batch)
    tracker = TensorMemoryTracker(model, optimizer, batch)
    with tracker:
        _training_step(model, optimizer, batch)
    breakdown = tracker.breakdown_bytes()
    parameters = sum(p.numel() * 4 for p in model.parameters())
    assert breakdown["weights"] == storage_bytes(weight_tensors(model))
    assert breakdown["gradients"] == parameters  # every parameter trains, fp32
    assert breakdown["optimizer_state"] == storage_bytes(optimizer_state_tensors(optimizer))
    assert breakdown["optimizer_state"] == 2 * parameters + 4 * len(
        list(model.parameters())
    )  # moments + step
    assert breakdown["other"] >= sum(t.numel() * t.element_size() for t in batch.values())
    assert 0 < breakdown["activations"] < tracker.peak_total


def test_a_parameter_gradient_never_counts_as_an_activation():
    """The word-embedding gradient (vocab x hidden) is created by a backward op before autograd
    hands it to the parameter; with a large vocabulary and a small batch it would dominate
    the activation peak if it were counted there for that instant."""
    model, batch = _model_and_batch(vocab_size=20_000, rows=2, length=8, dropout=0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    word_embedding_bytes = model.bert.embeddings.word_embeddings.weight.numel() * 4
    tracker = TensorMemoryTracker(model, optimizer, batch)
    with tracker:
        _training_step(model, optimizer, batch)
    assert tracker.breakdown_bytes()["activations"] < word_embedding_bytes / 4
    assert tracker.peak_total >= 2 * word_embedding_bytes  # the weight and its gradient, both counted


def test_monitor_watches_only_batches_that_can_set_a_new_peak():
    model, _ = _model_and_batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    monitor = MemoryMonitor(torch.device("cpu"))
    # (rows, length) per step: the first always, but it ran without optimizer state, so it covers
    # nothing; then only batches that no batch tracked since covers.
    shapes = [(4, 16), (4, 8), (4, 12), (4, 20), (2, 30), (4, 10), (4, 30), (3, 20)]
    tracked = []
    for rows, length in shapes:
        batch = {
            "input_ids": torch.randint(0, 100, (rows, length)),
            "attention_mask": torch.ones(rows, length, dtype=torch.long),
            "labels": torch.randint(0, 2, (rows,)),
        }
        monitor.before_forward(model, batch, optimizer, training=True)
        tracked.append(monitor.tracker is not None)
        _training_step(model, optimizer, batch)
        monitor.stop_tracking(optimizer_stepped=True)
    assert tracked == [True, True, True, True, True, False, True, False]
    results = monitor.finish()
    assert results["memory_tracked_steps"] == 6
    assert results["memory_peak_batch"] == {"rows": 4, "length": 30, "padded": False}
    assert all(results["memory_breakdown_gib"][key] > 0 for key in ("weights", "gradients", "activations"))


def test_a_run_writes_and_logs_memory_per_phase(tiny_bert, learnable_data, tmp_path, caplog):
    """In this process (the recipe's own main; test_end_to_end.py launches one as a user does)."""
    output_dir = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="recipes_lib"):
        run_in_process("full_ft", run_args(tiny_bert, learnable_data, output_dir, "--num_train_epochs", "1"))
    results = json.loads((output_dir / "results.json").read_text())
    phases = results["memory_phases"]
    assert list(phases) == ["model_load", "train", "evaluation"]
    for phase in phases.values():
        assert phase["max_allocated_gib"] > 0 and phase["peak_rss_gib"] > 0
        assert phase["max_reserved_gib"] is None and phase["max_active_gib"] is None  # no CUDA allocator
    breakdown = results["memory_breakdown_gib"]
    assert set(breakdown) == {"weights", "gradients", "optimizer_state", "activations", "other"}
    assert breakdown["gradients"] == pytest.approx(results["params_trainable"] * 4 / GIB, rel=1e-3)
    assert phases["train"]["max_allocated_gib"] == pytest.approx(results["tensor_peak_gib"], abs=1e-4)
    assert results["tensor_peak_gib"] <= sum(breakdown.values())
    # peak_memory_gib keeps its meaning: the process's peak RSS over the whole run on CPU.
    assert results["peak_memory_gib"] >= max(phase["peak_rss_gib"] for phase in phases.values()) - 1e-4
    log = caplog.text
    assert "Memory, train: max allocated" in log and "Memory breakdown (peak of each kind)" in log


def test_track_memory_false_keeps_what_costs_nothing(tiny_bert, learnable_data, tmp_path):
    results = run_in_process(
        "full_ft", run_args(tiny_bert, learnable_data, tmp_path / "run", "--track_memory", "false", **QUICK)
    )
    breakdown = results["memory_breakdown_gib"]
    assert breakdown["activations"] is None and breakdown["other"] is None
    assert breakdown["weights"] > 0 and breakdown["gradients"] > 0 and breakdown["optimizer_state"] > 0
    assert results["memory_phases"]["train"]["max_allocated_gib"] is None  # CPU: only the tracker knows
    assert results["memory_phases"]["train"]["peak_rss_gib"] > 0
    assert results["memory_tracked_steps"] == 0


def test_cuda_figures_come_from_the_allocator_with_peaks_reset_per_phase(monkeypatch):
    """The CUDA branch, run without a GPU: the allocator's counters are stood in for, phase by phase."""
    from recipes_lib.memory.peaks import peak_memory

    counters = {"allocated": 0, "reserved": 0, "active": 0}
    peaks = dict(counters)
    resets = []

    def allocate(allocated, reserved):
        counters.update(allocated=allocated, reserved=reserved, active=allocated)
        for key in counters:
            peaks[key] = max(peaks[key], counters[key])

    def reset_peaks(device=None):
        resets.append(dict(counters))
        peaks.update(counters)

    def memory_stats(device=None):
        return {
            "allocated_bytes.all.peak": peaks["allocated"],
            "reserved_bytes.all.peak": peaks["reserved"],
            "active_bytes.all.peak": peaks["active"],
            "allocated_bytes.all.current": counters["allocated"],
            "reserved_bytes.all.current": counters["reserved"],
        }

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset_peaks)
    monkeypatch.setattr(torch.cuda, "memory_stats", memory_stats)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * GIB, 100 * GIB))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: peaks["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: peaks["reserved"])

    monitor = MemoryMonitor(torch.device("cuda"), track_tensors=False)
    monitor.start_phase("model_load")
    allocate(1 * GIB, 2 * GIB)
    monitor.start_phase("train")  # ends model_load
    allocate(9 * GIB, 12 * GIB)
    allocate(3 * GIB, 12 * GIB)
    monitor.start_phase("evaluation")
    allocate(4 * GIB, 12 * GIB)
    results = monitor.finish()
    phases = results["memory_phases"]
    assert len(resets) == 3  # each phase starts from the counters as they are
    assert (
        phases["model_load"]["max_allocated_gib"] == 1 and phases["model_load"]["allocated_at_end_gib"] == 1
    )
    assert phases["train"]["max_allocated_gib"] == 9 and phases["train"]["max_reserved_gib"] == 12
    assert phases["evaluation"]["max_allocated_gib"] == 4  # the training peak was reset away
    assert phases["evaluation"]["device_used_gib"] == 20 and phases["evaluation"]["reserved_at_end_gib"] == 12
    # The whole run's peak survives the resets.
    assert peak_memory(torch.device("cuda"), monitor)["peak_memory_gib"] == 9
