"""AReaL's PPOTrainer against stock vLLM servers, in AReaL's SPMD mode (one process per FSDP rank).

`CUATrainer` keeps `PPOTrainer.train` and changes what it calls:
- the rollout engine is our `TrainingEngine` (a `StockVLLMEngine`; AReaL's `_init_rollout` builds
  `RemotevLLMEngine`, which needs AReaL's patched vLLM server), and the workflow is submitted wrapped in
  `TrackedWorkflow` (train/rollouts.py);
- the train dataloader is wrapped in a `TaskFeed` (rows in flight at a checkpoint are replayed on resume);
- recover checkpoints are `RecoverCheckpoints` (atomic, checked, with LR scheduler and RNG; AReaL's own
  recover is switched off inside PPOTrainer);
- each step's stats get the run's fault counters and what the policy achieved in the groups the step
  consumed, summed over every trainer rank, and a line in steps.jsonl;
- a stop signal ends the run at a consistent point (`request_stop`; the handler is in train/job.py): every
  rank acts on a stop or an abort only where all of them agree on it (train/stopping.py).
"""

from __future__ import annotations

import json
import os
import signal
import time
from copy import deepcopy
from pathlib import Path
from typing import Any

import torch.distributed as dist
from areal import PPOTrainer
from areal.api import StepInfo
from areal.api.cli_args import InferenceEngineConfig
from areal.utils import logging
from areal.utils.environ import is_single_controller
from areal.utils.stats_logger import StatsLogger

from cua_agent.config import CUAGRPOConfig, lora_target_modules
from cua_agent.evaluate.held_out import HeldOutEval, eval_stats
from cua_agent.inference.processing import load_processor
from cua_agent.rollout.outcomes import add_tallies, rates
from cua_agent.train import lr_groups
from cua_agent.train import patches as trainer_patches
from cua_agent.train.checkpointing import RecoverCheckpoints, fingerprint
from cua_agent.train.data_feed import DRAW_KEY, TaskFeed
from cua_agent.train.progress import StepProgress
from cua_agent.train.rollouts import TrackedWorkflow, TrainingEngine
from cua_agent.train.stopping import StopDeadline, StopTraining, decide, gather

logger = logging.getLogger("CUATrainer")


class CUATrainer(PPOTrainer):
    """PPOTrainer whose rollout engine is a `TrainingEngine` on the given server addresses."""

    def __init__(
        self,
        config: CUAGRPOConfig,
        train_dataset: Any,
        valid_dataset: Any = None,
        *,
        server_addresses: list[str],
        workflow: Any = None,
        resume_from: Path | None = None,
    ):
        if not server_addresses:
            raise ValueError("CUATrainer needs at least one vLLM server address")
        self.server_addresses = list(server_addresses)
        self.workflow = workflow  # for its episode counters in the step stats
        self.stop_signal: int | None = None
        self.stop_deadline: StopDeadline | None = None  # from the first stop signal on
        self._abort_seen = False
        self._in_eval = False  # rank 0 plays the held-out evaluation (a stop ends it early)
        self.tracked: TrackedWorkflow | None = None  # the workflow as train() submits it
        self.last_finished: StepInfo | None = None
        trainer_patches.install(config.actor.attn_impl)
        lr_groups.install(config.lr_groups)
        # AReaL's recover (fixed directory, saved in place, no LR scheduler/RNG) is replaced by ours.
        recover_mode, config.recover.mode = config.recover.mode, "disabled"
        # LoRA: AReaL hands actor.target_modules to PEFT as it is; a regular expression keeps the adapters
        # on the language model (config.lora_target_modules).
        target_modules = config.actor.target_modules
        if config.actor.use_lora:
            config.actor.target_modules = lora_target_modules(config)  # type: ignore[assignment]
        try:
            super().__init__(config, train_dataset=train_dataset, valid_dataset=valid_dataset)
        finally:
            config.recover.mode = recover_mode
            config.actor.target_modules = target_modules
        trainer_patches.install_screenshot_pixels(
            load_processor(config.tokenizer_path or config.actor.path).image_processor
        )
        self.checkpoints = RecoverCheckpoints(
            config,
            self.recover_handler.ft_spec,
            fingerprint(config, self.actor.data_parallel_world_size, len(self.train_dataloader)),
        )
        if resume_from is not None:
            self.recover_info = self._resume(resume_from)
        self.rollout.ranks = self.actor.cpu_group  # where the ranks agree on a stop (train/stopping.py)
        self._next_lr = self._lr()
        self._counted: dict[str, float] = {}
        self._eval_stats: dict[str, float] = {}  # the step's held-out evaluation, when one ran
        self.held_out = HeldOutEval(config) if config.evaluation.enabled else None
        self.steps_path = Path(StatsLogger.get_log_path(config.stats_logger)) / "steps.jsonl"
        self.progress: StepProgress | None = None  # rank 0, during train(): a line while a step waits

    def _create_dataloader(self, dataset: Any, dataset_config: Any, rank: int, world_size: int) -> Any:
        loader = super()._create_dataloader(dataset, dataset_config, rank, world_size)
        return TaskFeed(loader) if dataset_config is self.config.train_dataset else loader

    # ---- resume -----------------------------------------------------------------------------------------
    def _resume(self, path: Path) -> Any:
        """Everything a continuous run has at this point, then the servers get the checkpoint's weights
        (as the version the interrupted run would have served next)."""
        start = time.monotonic()
        info = self.checkpoints.load(
            path, self.actor, self.saver, self.evaluator, self.stats_logger, self.train_dataloader
        )
        version = info.last_step_info.global_step + 1
        meta = self.weight_update_meta.with_version(version)
        self.rollout.pause()
        try:
            self.actor.update_weights(meta)
            self.actor.set_version(version)
            self.rollout.set_version(version)  # before any episode starts: requests name this version
            if self.eval_rollout is not None:
                self.eval_rollout.set_version(version)
        finally:
            self.rollout.resume()
        manager = self.rollout.workflow_executor.staleness_manager
        if manager is not None:  # as PPOTrainer after AReaL's recover: capacity follows the version jump
            manager.on_version_recovered(version)
        logger.info(
            f"Resumed from {path} in {time.monotonic() - start:.1f}s: next step {version + 1}, "
            f"lr {self._lr():.3g}, {len(self.train_dataloader.outstanding)} row(s) in flight at the save "
            f"replayed first, servers serve version {version}"
        )
        return info

    def _lr(self) -> float:
        return float(self.actor.lr_scheduler.get_last_lr()[0])

    # ---- per step (PPOTrainer.train calls these) ----------------------------------------------------------
    def _save_recover_checkpoint(self, epoch: int, epoch_step: int, global_step: int) -> None:
        step_info = StepInfo(
            global_step=global_step,
            epoch=epoch,
            epoch_step=epoch_step,
            steps_per_epoch=len(self.train_dataloader),
        )
        self.last_finished = step_info
        if not self.checkpoints.enabled:
            return
        due = self.checkpoints.due(step_info)
        stopping = self.stop_signal is not None and self.config.checkpoint.save_on_stop
        if _agree(due or stopping, self.actor):
            self.checkpoints.save(
                step_info, self.actor, self.saver, self.evaluator, self.stats_logger, self.train_dataloader
            )

    def _export_and_commit_stats(self, epoch: int, epoch_step: int, global_step: int) -> None:
        """The step's stats, summed over every rank; then the ranks stop or abort together if any of them
        was asked to (a collective: every rank is here)."""
        stats = self.actor.export_stats()
        stats.update(self.rollout.export_stats())
        if self.eval_rollout is not None:
            stats.update(self.eval_rollout.export_stats())
        fatal = self.rollout.fatal
        rank = dist.get_rank() if dist.is_initialized() else 0
        ranks = gather(
            {
                "faults": self._fault_counts(),
                "groups": [
                    *(("trained", rank, g) for g in self.rollout.trained_groups),
                    *(("dropped", rank, g) for g in self.rollout.dropped_groups),
                ],
                "rows": [
                    {
                        "rank": rank,
                        "draw": r.get(DRAW_KEY),
                        "task_id": r.get("task_id"),
                        "seed": r.get("seed"),
                    }
                    for r in self.rollout.last_trained_rows
                ],
                "state": (self.stop_signal, None if fatal is None else str(fatal)),
            },
            self.actor.cpu_group,
        )
        faults = add_tallies(r["faults"] for r in ranks)
        groups = [g for r in ranks for g in r["groups"]]
        outcomes = rates(add_tallies(g.tallies for _, _, g in groups))
        stats.update({f"cua/{k}": v for k, v in faults.items()})
        stats.update({f"cua/policy/{k}": v for k, v in outcomes.items()})  # e.g. cua/policy/all/success_rate
        evaluated, self._eval_stats = self._eval_stats, {}
        stats.update(evaluated)
        self.stats_logger.commit(epoch, epoch_step, global_step, stats)
        lr, self._next_lr = self._next_lr, self._lr()
        if _is_rank0():
            rows = [row for r in ranks for row in r["rows"]]
            self._record_step(global_step, lr, faults, outcomes, evaluated, stats, rows, groups)
            if self.progress is not None:
                self.progress.step_done(global_step)
        decide([r["state"] for r in ranks])

    def _fault_totals(self) -> dict[str, float]:
        """This rank's episode and server fault counters, cumulative."""
        totals: dict[str, float] = dict(self.rollout.counters)
        if self.workflow is not None and hasattr(self.workflow, "stats"):
            totals.update(self.workflow.stats)
        if self.tracked is not None:
            totals.update(self.tracked.stats)
        return totals

    def _fault_counts(self) -> dict[str, float]:
        """This rank's episode and server fault counts since the last step (counted as they happen)."""
        totals = self._fault_totals()
        step = {k: v - self._counted.get(k, 0) for k, v in totals.items()}
        self._counted = totals
        return step

    def _record_step(
        self,
        global_step: int,
        lr: float,
        faults: dict[str, float],
        outcomes: dict[str, float],
        evaluated: dict[str, float],
        stats: dict[str, float],
        rows: list[dict[str, Any]],
        groups: list[tuple[str, int, Any]],
    ) -> None:
        """steps.jsonl, one line per step, over every rank: `rows` the step trained (a rank's draw numbers
        are its own); `groups` it consumed (trained, or filtered and rejected while its batch was
        collected), by the group ids of rollouts*.jsonl; `episodes` the rates of those groups' scored
        episodes; `faults` what went wrong on any rank since the previous step."""
        record = {
            "global_step": global_step,
            "lr": lr,
            "weight_version": self.rollout.get_version(),
            "rows": rows,
            "groups": {
                fate: [{"rank": r, **g.to_json()} for f, r, g in groups if f == fate]
                for fate in ("trained", "dropped")
            },
            "faults": faults,
            "episodes": outcomes,
            "eval": evaluated,
            # where the step's time went (rollout, train_step, update_weights, eval, ...) and the weight
            # versions the update saw (staleness): the viewer's plots read them from here
            "timing": {
                k.removeprefix("timeperf/"): float(v) for k, v in stats.items() if k.startswith("timeperf/")
            },
            "versions": {k.rsplit("/", 1)[-1]: float(v) for k, v in stats.items() if "/version_stats/" in k},
            # pi_proximal / pi_behaviour (behave_imp_weight) and pi / pi_old (importance_weight), min/avg/max
            # over the step's tokens: 1 for rows sampled by the weights being trained, when the server serves
            # exactly what the trainer holds
            "importance": {
                k.removeprefix("ppo_actor/update/").replace("/", "_"): float(v)
                for k, v in stats.items()
                if k.startswith(
                    ("ppo_actor/update/behave_imp_weight/", "ppo_actor/update/importance_weight/")
                )
            },
            "pid": os.getpid(),
            "time": time.time(),
        }
        self.steps_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.steps_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        failures = {k: v for k, v in faults.items() if v and k not in ("episodes", "rows")}
        n = int(outcomes.get("all/episodes", 0))
        scored = (
            f"success {outcomes['all/success_rate']:.0%} of {n} scored, task reward "
            f"{outcomes['all/task_reward']:.2f}, {outcomes['all/episode_turns']:.1f} turns, format failures "
            f"{outcomes['all/format_failure_rate']:.0%} of turns, quits {outcomes['all/quit_rate']:.0%}"
            if n
            else "no episode scored"
        )
        logger.info(
            f"Step {global_step + 1}: {scored}; {int(faults.get('episodes', 0))} episodes, lr {lr:.3g}, "
            f"served version {record['weight_version']}"
            + (
                f", faults: {', '.join(f'{k}={int(v)}' for k, v in sorted(failures.items()))}"
                if failures
                else ""
            )
        )

    # ---- held-out evaluation -------------------------------------------------------------------------------
    def _evaluate(
        self, eval_workflow: Any, eval_workflow_kwargs: Any, epoch: int, epoch_step: int, global_step: int
    ) -> None:
        """When AReaL's `evaluator` section says it is due and `evaluation.enabled`: rank 0 plays the held-out
        rows against the servers, which serve this step's weights by now (under LoRA, as this version's
        adapter); every rank waits for it. The numbers join this step's stats (eval/...) and its steps.jsonl
        line."""
        if self.held_out is None:
            return
        self.evaluator.evaluate(lambda: self._evaluate_held_out(global_step), epoch, epoch_step, global_step)
        if dist.is_initialized():
            dist.barrier(group=self.actor.cpu_group)

    def _evaluate_held_out(self, global_step: int) -> None:
        if not _is_rank0():
            return
        out = Path(self.config.cluster.fileroot) / "eval" / f"step{global_step + 1}"
        start = time.monotonic()
        # under LoRA the servers serve this step's weights as its adapter, not under the base model's name
        model = self.rollout.model_for(self.rollout.get_version())
        try:
            self._in_eval = True
            report = self.held_out.run(self.server_addresses, out, model=model)
        except StopTraining as stop:  # the other ranks wait at the barrier; every rank stops after it
            logger.warning(f"Held-out eval after step {global_step + 1} abandoned: {stop}")
            self._eval_stats = {"eval/abandoned": 1.0}
            return
        except Exception as exc:  # an evaluation that cannot run (servers, sandboxes) never stops training
            logger.warning(f"Held-out eval after step {global_step + 1} failed: {type(exc).__name__}: {exc}")
            self._eval_stats = {"eval/failed": 1.0}
            return
        finally:
            self._in_eval = False
        self._eval_stats = eval_stats(report)
        s = report.overall
        logger.info(
            f"Held-out eval after step {global_step + 1}: success {s.success_rate:.0%} "
            f"[{s.ci95[0]:.0%}, {s.ci95[1]:.0%}] of {s.episodes} episodes, task reward {s.task_reward:.2f}, "
            f"format failures {s.format_failure_rate:.0%} of turns, {s.infra_failures} lost to infrastructure "
            f"({time.monotonic() - start:.0f}s; {out / 'report.md'})"
        )

    # ---- stopping -----------------------------------------------------------------------------------------
    def on_signal(self, signum: int) -> None:
        """The job's SIGINT/SIGTERM handler (train/job.py), in the main thread. An abort from the rollout
        thread arrives as a SIGINT too (`TrainingEngine.abort_run`)."""
        if self.rollout.fatal is not None and not self._abort_seen:
            self._abort_seen = True
            if self.rollout.waiting_for_batch:
                raise self.rollout.fatal  # out of this rank's wait; the ranks abort together after it
            return  # the ranks abort together at the end of this step
        self.request_stop(signum)

    def request_stop(self, signum: int) -> None:
        """Stop at the next point every rank agrees on: right away while this rank waits for its episodes
        (the model is still the last finished step's), else after this step's update and checkpoint. The
        whole stop, checkpoint included, is bounded by checkpoint.stop_timeout_s from the first signal. A
        signal more than `StopDeadline.REPEAT_S` after it (Ctrl-C again) exits at once."""
        if self.stop_deadline is None:
            self.stop_signal = self.rollout.stop_requested = signum
            self.stop_deadline = StopDeadline(
                self.config.checkpoint.stop_timeout_s, self._remove_own_sandboxes, 128 + signum
            ).start()
            logger.warning(
                f"{signal.Signals(signum).name}: stopping "
                + ("now" if self.rollout.waiting_for_batch else "after this step's update and checkpoint")
                + f" (within checkpoint.stop_timeout_s={self.config.checkpoint.stop_timeout_s:.0f}s)"
            )
        elif self.stop_deadline.repeated():
            self.stop_deadline.expire(f"{signal.Signals(signum).name} again")
        if self.rollout.waiting_for_batch or self._in_eval:
            raise StopTraining(signum)

    def _remove_own_sandboxes(self) -> None:
        if self.workflow is not None and hasattr(self.workflow, "remove_own_sandboxes"):
            left = self.workflow.remove_own_sandboxes()
            if left:
                logger.info(f"Removed {len(left)} sandbox(es) of episodes still in flight: {left}")

    def close(self) -> None:
        """PPOTrainer's exit, then the boxes of the episodes in flight at the end (a stop, an abort, the
        rollouts ahead of the last step): they outlive the rollout thread, and a process that lives on after
        its run (a Ray worker after its trainer task) would keep them until it exits."""
        try:
            super().close()
        finally:
            try:
                self._remove_own_sandboxes()
            except Exception as exc:  # the exit hook tries again when the process ends
                logger.warning(f"Removing this run's remaining sandboxes failed: {exc}")

    def save_on_stop(self) -> Path | None:
        """A stop during the rollout wait: checkpoint the last finished step if it has none yet."""
        step = self.last_finished
        if (
            step is None
            or not self.checkpoints.enabled
            or not self.config.checkpoint.save_on_stop
            or self.checkpoints.last_saved_step >= step.global_step
        ):
            return None
        return self.checkpoints.save(
            step, self.actor, self.saver, self.evaluator, self.stats_logger, self.train_dataloader
        )

    def train(self, workflow: Any = None, *args: Any, **kwargs: Any) -> None:
        """PPOTrainer.train with the workflow wrapped for the run's bookkeeping (train/rollouts.py)."""
        agent = self.config.agent
        self.tracked = TrackedWorkflow(
            workflow,
            self.rollout,
            agent.max_rejected_in_a_row,
            agent.filter_equal_reward_groups,
            agent.max_filtered_in_a_row,
        )
        progress = None
        if _is_rank0():
            per_rank = self.config.train_dataset.batch_size // max(1, self.actor.data_parallel_world_size)
            resumed = getattr(self, "recover_info", None)
            first = resumed.last_step_info.global_step + 2 if resumed is not None else 1
            self.progress = progress = StepProgress(
                self._fault_totals, per_rank * agent.group_size, logger.info, first_step=first
            )
            progress.start()
        try:
            super().train(self.tracked, *args, **kwargs)
        finally:
            if progress is not None:
                progress.stop()

    def _init_rollout(
        self,
        rollout_config: InferenceEngineConfig,
        is_eval: bool = False,
        lora_path: str | None = None,
    ) -> TrainingEngine | None:
        if is_single_controller():
            raise RuntimeError("CUATrainer runs in AReaL's SPMD mode: set AREAL_SPMD_MODE=1 (run() does)")
        if (lora_path is not None) != bool(self.config.actor.use_lora):
            raise RuntimeError(
                f"AReaL gave lora_path={lora_path!r} with actor.use_lora={self.config.actor.use_lora}"
            )
        if is_eval and self.config.valid_dataset is None:
            return None  # no evaluation: no second engine (PPOTrainer checks eval_rollout for None)
        config = deepcopy(rollout_config)
        if is_eval:
            config.max_head_offpolicyness = int(1e12)  # as AReaL: no staleness control in evaluation
        engine = TrainingEngine(
            config,
            tied_embeddings=self.config.inference.tied_embeddings,
            recovery_timeout_s=self.config.inference.recovery_timeout_s,
            weights_owner=_is_rank0(),  # AReaL loads new weights from rank 0 only (inference/engine.py)
        )
        engine.initialize(
            addr=self.server_addresses, train_data_parallel_size=self.actor_alloc.parallel.dp_size
        )
        if lora_path is not None:  # AReaL's lora_keep_versions: the staleness window plus a margin
            keep = self.config.rollout.max_head_offpolicyness + 2
            engine.serve_lora(self.config.gconfig.lora_name, keep, initial_adapter=lora_path)
        return engine


def _is_rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _agree(decision: bool, actor: Any) -> bool:
    """Rank 0's decision for every rank (a save is collective; time- or signal-based choices may differ)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return decision
    box = [decision]
    dist.broadcast_object_list(box, src=0, group=actor.cpu_group)
    return bool(box[0])
