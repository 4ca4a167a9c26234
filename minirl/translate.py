"""minirl's names in TRL and verl: every RLConfig field next to its counterparts, and a config as TRL's GRPOConfig.

    python -c "from minirl.translate import names_table; print(names_table())"    # the table in minirl/README.md
    kwargs = to_trl(RLConfig.preset("dapo_nods"))    # then trl.GRPOConfig(output_dir=..., **kwargs)

TRL stays out of minirl's dependencies: `to_trl` returns plain keyword arguments, and tests/test_translate.py builds
a real `trl.GRPOConfig` from them (and trains with one) where TRL is installed. What TRL cannot express (a critic,
dynamic sampling, the overlong punishment as a switch, ...) is refused with one ConfigError that names every such
field, rather than translated into something that trains differently.

The batch: minirl samples batch_size prompts x group_size completions per step (N rows) and splits them into
`minibatches` optimiser steps, `epochs` times. TRL generates `generation_batch_size` completions at once and takes
one optimiser step per `gradient_accumulation_steps` micro-batches of `per_device_train_batch_size` rows per
process; `steps_per_generation` micro-batches use up one generation, `num_iterations` times.
"""

from __future__ import annotations

from .config import ConfigError, RLConfig

# field -> (TRL GRPOConfig, verl key); None where the tool has no such setting. verl keys are relative to
# actor_rollout_ref (actor., rollout.), algorithm., critic., data. or reward_model. as in verl's ppo_trainer.yaml.
NAMES: dict[str, tuple[str | None, str | None]] = {
    "algo": (None, None),
    "batch_size": ("generation_batch_size / num_generations", "data.train_batch_size"),
    "group_size": ("num_generations", "actor_rollout_ref.rollout.n"),
    "steps": ("max_steps (optimiser steps: steps x epochs x minibatches)", "trainer.total_training_steps"),
    "lr": ("learning_rate", "actor_rollout_ref.actor.optim.lr"),
    "epochs": ("num_iterations", "actor_rollout_ref.actor.ppo_epochs"),
    "minibatches": ("steps_per_generation / gradient_accumulation_steps",
                    "train_batch_size / actor_rollout_ref.actor.ppo_mini_batch_size"),
    "micro_batch_size": ("per_device_train_batch_size (with gradient_accumulation_steps)",
                         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"),
    "length_buckets": (None, "actor_rollout_ref.actor.use_dynamic_bsz (packs by tokens instead)"),
    "share_prompts": (None, None),
    "max_grad_norm": ("max_grad_norm", "actor_rollout_ref.actor.grad_clip"),
    "warmup_steps": ("warmup_steps", "actor_rollout_ref.actor.optim.lr_warmup_steps"),
    "weight_decay": ("weight_decay", "actor_rollout_ref.actor.optim.weight_decay"),
    "adam_beta1": ("adam_beta1", "actor_rollout_ref.actor.optim.betas[0]"),
    "adam_beta2": ("adam_beta2", "actor_rollout_ref.actor.optim.betas[1]"),
    "adam_eps": ("adam_epsilon", None),
    "fused_adamw": ('optim="adamw_torch_fused"', None),
    "policy_loss": ('loss_type="cispo" for cispo', "actor_rollout_ref.actor.policy_loss.loss_mode (vanilla, cispo)"),
    "ratio_level": ("importance_sampling_level", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"),
    "clip_low": ("epsilon", "actor_rollout_ref.actor.clip_ratio_low"),
    "clip_high": ("epsilon_high (cispo: 1 + clip_high)", "actor_rollout_ref.actor.clip_ratio_high"),
    "dual_clip": (None, "actor_rollout_ref.actor.clip_ratio_c"),
    "loss_agg": ("loss_type (grpo, dapo, dr_grpo)", "actor_rollout_ref.actor.loss_agg_mode (the same four names)"),
    "entropy_coef": ("entropy_coef", "actor_rollout_ref.actor.entropy_coeff"),
    "kl_coef": ("beta", "actor_rollout_ref.actor.kl_loss_coef / algorithm.kl_ctrl.kl_coef"),
    "kl_estimator": ("(k3 only)", "actor_rollout_ref.actor.kl_loss_type (k1, mse = k2, low_var_kl = k3)"),
    "kl_placement": ("(loss only)", "actor_rollout_ref.actor.use_kl_loss / algorithm.use_kl_in_reward"),
    "advantage": ("(group only)", "algorithm.adv_estimator (gae, grpo, rloo)"),
    "adv_scale": ("scale_rewards (group, batch, none)", "algorithm.norm_adv_by_std_in_grpo (group or none)"),
    "adv_eps": ("(1e-4, fixed)", "(1e-6, fixed)"),
    "whiten_advantages": (None, None),
    "gamma": (None, "algorithm.gamma"),
    "lam": (None, "algorithm.lam"),
    "critic": (None, "critic.*"),
    "vf_coef": (None, None),
    "value_clip": (None, "critic.cliprange_value"),
    "critic_lr": (None, "critic.optim.lr"),
    "dynamic_sampling": (None, "algorithm.filter_groups.enable (DAPO recipe)"),
    "dynamic_sampling_metric": (None, "algorithm.filter_groups.metric (acc = correct)"),
    "max_gen_batches": (None, "algorithm.filter_groups.max_num_gen_batches"),
    "overlong_filter": ("mask_truncated_completions", None),
    "overlong_punishment": ("(a reward function: trl.rewards.get_soft_overlong_punishment)",
                            "reward_model.overlong_buffer.enable"),
    "overlong_cache": ("soft_punish_cache of that reward function", "reward_model.overlong_buffer.len"),
    "temperature": ("temperature", "actor_rollout_ref.rollout.temperature"),
    "top_p": ("top_p", "actor_rollout_ref.rollout.top_p"),
    "max_new_tokens": ("max_completion_length", "data.max_response_length"),
    "eval_every": ("eval_steps", "trainer.test_freq"),
    "eval_n": (None, None),
    "eval_sampled_k": (None, "actor_rollout_ref.rollout.val_kwargs.n"),
    "eval_split": (None, None),
    "checkpoint_every": ("save_steps", "trainer.save_freq"),
    "mixed_precision": ("bf16 / fp16", "actor_rollout_ref.actor.fsdp_config.mixed_precision"),
    "seed": ("seed", "data.seed"),
}
LOSS_TYPES = {"seq-mean-token-mean": "grpo", "token-mean": "dapo", "seq-mean-token-sum-norm": "dr_grpo"}


def names_table() -> str:
    """The Markdown table of every RLConfig field and its TRL and verl names (minirl/README.md holds it)."""
    cell = lambda name: "—" if name is None else f"`{name}`" if " " not in name and "(" not in name else name
    rows = [f"| `{field}` | {cell(trl)} | {cell(verl)} |" for field, (trl, verl) in NAMES.items()]
    return "\n".join(["| minirl `RLConfig` | TRL `GRPOConfig` | verl |", "|---|---|---|", *rows])


def to_trl(config: RLConfig, num_processes: int = 1) -> dict:
    """The `trl.GRPOConfig` keyword arguments that train like `config` (without output_dir and logging), for a
    run on `num_processes` processes. A ConfigError names every field whose value TRL cannot express."""
    config = config.validate()
    refused = []

    def refuse(field: str, why: str) -> None:
        refused.append(f"{field}={getattr(config, field)!r} ({why})")

    if config.advantage != "group":
        refuse("advantage", "GRPOTrainer has group advantages only; no critic, no leave-one-out (TRL's RLOOTrainer)")
    if config.whiten_advantages:
        refuse("whiten_advantages", "GRPOTrainer does not whiten advantages")
    if config.kl_coef > 0 and config.kl_estimator != "k3":
        refuse("kl_estimator", "GRPOTrainer's KL term is k3")
    if config.kl_coef > 0 and config.kl_placement != "loss":
        refuse("kl_placement", "GRPOTrainer adds its KL term to the loss, not to the reward")
    if config.dynamic_sampling:
        refuse("dynamic_sampling", "GRPOTrainer keeps every group; verl's DAPO recipe has filter_groups")
    if config.overlong_punishment:
        refuse("overlong_punishment", "a reward in TRL: add trl.rewards.get_soft_overlong_punishment("
               f"max_completion_len={config.max_new_tokens}, soft_punish_cache={config.overlong_cache}) to "
               "reward_funcs and switch it off here")
    if config.dual_clip:
        refuse("dual_clip", "GRPOTrainer has no dual clip (its `delta` caps the ratio of every token, not the loss)")
    if config.loss_agg not in LOSS_TYPES:
        refuse("loss_agg", f"TRL's loss types are {sorted(LOSS_TYPES.values())}; bnpo averages per micro-batch")
    if config.policy_loss == "cispo" and config.loss_agg != "token-mean":
        refuse("loss_agg", "TRL's cispo normalises by the step's tokens: use loss_agg='token-mean'")
    if config.policy_loss == "cispo" and config.clip_low < 1:
        refuse("clip_low", "TRL's cispo has no lower bound on the weight: use clip_low=1.0")
    if config.entropy_coef and config.loss_agg != "token-mean":
        refuse("entropy_coef", "TRL averages the entropy bonus over tokens, minirl aggregates it like the loss")
    if config.adv_eps != 1e-4:
        refuse("adv_eps", "TRL divides by std + 1e-4")
    rows_per_update, leftover = divmod(config.samples_per_step, config.minibatches * num_processes)
    if leftover:
        refuse("minibatches", f"{config.samples_per_step} completions do not split into {config.minibatches} "
               f"minibatches on {num_processes} processes")
    if refused:
        raise ConfigError("TRL's GRPOConfig cannot express " + "; ".join(refused))

    micro = config.micro_batch_size or rows_per_update
    accumulation = rows_per_update // micro
    cispo = config.policy_loss == "cispo"
    kwargs = dict(
        num_generations=config.group_size,  # a generation: micro x processes x steps_per_generation completions
        per_device_train_batch_size=micro, gradient_accumulation_steps=accumulation,
        steps_per_generation=config.minibatches * accumulation, num_iterations=config.epochs,
        max_steps=config.steps * config.epochs * config.minibatches,
        learning_rate=config.lr, lr_scheduler_type="constant_with_warmup", warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay, adam_beta1=config.adam_beta1, adam_beta2=config.adam_beta2,
        adam_epsilon=config.adam_eps, max_grad_norm=config.max_grad_norm,  # 0: no clipping in both
        optim="adamw_torch_fused" if config.fused_adamw else "adamw_torch",
        loss_type="cispo" if cispo else LOSS_TYPES[config.loss_agg],
        importance_sampling_level=config.ratio_level,
        epsilon=config.clip_low, epsilon_high=1.0 + config.clip_high if cispo else config.clip_high,
        beta=config.kl_coef, scale_rewards=config.adv_scale, mask_truncated_completions=config.overlong_filter,
        entropy_coef=config.entropy_coef, temperature=config.temperature, top_p=config.top_p,
        max_completion_length=config.max_new_tokens, seed=config.seed,
        bf16=config.mixed_precision == "bf16", fp16=config.mixed_precision == "fp16",
    )
    if config.group_size < 2:  # TRL needs a group; minirl's group advantages do too (RLConfig.validate)
        kwargs.pop("num_generations")
    return kwargs
