"""configs/cua_grpo_multinode.yaml loads as the trainers load it (CUAGRPOConfig) and as the Ray launcher
reads it, and its numbers agree with each other: one trainer per Ray GPU, batches split evenly over the
ranks, sandboxes per rank for the groups it runs, everything under the shared fileroot."""

from __future__ import annotations

from areal.api.alloc_mode import ModelAllocation
from areal.api.cli_args import SchedulingSpec, load_expr_config
from omegaconf import OmegaConf

from cua_agent.config import CUAGRPOConfig
from cua_agent.inference.local_server import REPO
from cua_agent.train.launch_ray import GIB, RayLaunchError, check_capacity, check_config
from tests.deploy.test_launch_ray import launcher_config

CONFIG = "configs/cua_grpo_multinode.yaml"


def load(*overrides: str) -> CUAGRPOConfig:
    cfg, _ = load_expr_config(["--config", str(REPO / CONFIG), *overrides], CUAGRPOConfig)
    return cfg


def test_loads_and_numbers_agree():
    cfg = load()
    world = cfg.cluster.n_nodes * cfg.cluster.n_gpus_per_node
    assert (cfg.cluster.n_nodes, world) == (2, 8)
    actor = ModelAllocation.from_str(cfg.actor.backend, name="actor").parallel
    assert actor.world_size == world and cfg.allocation_mode == cfg.actor.backend
    assert cfg.train_dataset.batch_size % actor.dp_size == 0
    per_rank_groups = cfg.rollout.max_concurrent_rollouts // actor.dp_size
    assert cfg.sandbox.max_concurrency == per_rank_groups * cfg.agent.group_size
    assert cfg.actor.scheduling_spec[0] == SchedulingSpec(cpu=8, mem=64)
    assert cfg.actor.weight_update_mode == "disk" and not cfg.inference.launch_local
    assert len(cfg.inference.addresses) == cfg.cluster.n_nodes  # one vLLM server per node
    shared = cfg.cluster.fileroot
    assert shared.startswith("/") and cfg.cluster.name_resolve.type == "nfs"
    for path in (cfg.cluster.name_resolve.nfs_record_root, cfg.stats_logger.tensorboard.path):
        assert path.startswith(shared + "/")
    for section in (cfg.saver, cfg.recover, cfg.stats_logger, cfg.evaluator, cfg.rollout):
        assert section.fileroot == shared


def test_overrides_from_the_readme():
    cfg = load("cluster.fileroot=/shared/cua-grpo", 'inference.addresses=["10.0.0.1:8000","10.0.0.2:8000"]')
    assert cfg.inference.addresses == ["10.0.0.1:8000", "10.0.0.2:8000"]
    assert cfg.recover.fileroot == "/shared/cua-grpo"
    assert cfg.cluster.name_resolve.nfs_record_root == "/shared/cua-grpo/name_resolve"


def test_no_environment_interpolation():
    # every trainer loads the file again on its own node, with the environment of that node's `ray start`
    raw = OmegaConf.to_container(OmegaConf.load(REPO / CONFIG), resolve=False)

    def strings(node: object) -> list[str]:
        if isinstance(node, dict):
            return [s for v in node.values() for s in strings(v)]
        if isinstance(node, list):
            return [s for v in node for s in strings(v)]
        return [node] if isinstance(node, str) else []

    values = strings(raw)
    assert "${cluster.fileroot}/name_resolve" in values  # interpolations are seen
    assert [v for v in values if "oc.env" in v] == []


def test_launcher_accepts_it_on_two_8_gpu_nodes():
    cfg = launcher_config(config=CONFIG)
    check_config(cfg)
    # Ray nodes started with CUDA_VISIBLE_DEVICES=4,5,6,7 --num-gpus 4 on hosts of 96 cores, 1 TiB
    ray_node = {"Alive": True, "Resources": {"GPU": 4, "CPU": 96, "memory": 1024 * GIB}}
    check_capacity(cfg, [ray_node, dict(ray_node)])
    try:
        check_capacity(cfg, [ray_node])
    except RayLaunchError as e:
        assert "1 of 2 trainer bundles of 4 GPU, 32 CPU, 256 GiB" in str(e)
    else:
        raise AssertionError("one node cannot hold both trainer bundles")
