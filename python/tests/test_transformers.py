"""hal.transformers: attn_implementation="hal" in Hugging Face transformers models hal did not write (tiny configs,
random weights), against attn_implementation="sdpa": logits and gradients, with and without padding, greedy
generation; and a count showing where hal's kernels ran."""
import collections
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import hal.transformers as ht  # noqa: E402

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128)
FAMILIES = {
    "llama": lambda: transformers.LlamaConfig(num_key_value_heads=2, **TINY),
    "mistral": lambda: transformers.MistralConfig(num_key_value_heads=2, sliding_window=None, **TINY),
    "qwen2": lambda: transformers.Qwen2Config(num_key_value_heads=2, **TINY),
    "gemma": lambda: transformers.GemmaConfig(num_key_value_heads=1, head_dim=16, **TINY),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=128,
                                            attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0,
                                            eos_token_id=0),
}


def pair(family):
    """The same weights twice: attn_implementation "sdpa" and "hal"."""
    config = FAMILIES[family]()
    torch.manual_seed(0)
    reference = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").float()
    mine = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="hal").float()
    mine.load_state_dict(reference.state_dict())
    return reference, mine


def attention_modules(model):
    return [m for name, m in model.named_modules() if ht.calls_of(m)]


def tokens(batch=2, seq=24, seed=1):
    return torch.randint(0, 128, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_and_gradients_equal_sdpa_and_hal_ran(family):
    reference, mine = pair(family)
    ids = tokens()
    ht.reset_counts()
    outputs = []
    for model in (reference, mine):
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        outputs.append((out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (ref_logits, ref_grads), (logits, grads) = outputs
    assert (logits - ref_logits).abs().max().item() < 2e-5
    for name, grad in grads.items():
        scale = ref_grads[name].abs().max().item() + 1e-12
        assert (grad - ref_grads[name]).abs().max().item() / scale < 2e-4, name
    layers = attention_modules(mine)
    assert len(layers) == 2, ht.describe(mine)
    for module in layers:
        assert ht.calls_of(module) == {"hal": 1}, ht.describe(mine)  # hal's kernels, no fallback


@pytest.mark.parametrize("side", ["left", "right", "packed"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_padded_and_packed_batches_equal_sdpa_on_hal_kernels(family, side, monkeypatch):
    """The padding mask reaches the attention (hal registers the mask function too) and runs on hal's kernels as
    key ranges: logits at the real tokens and every gradient equal sdpa's, and no call fell back. "packed": two
    documents in one row, position_ids restarting (as DataCollatorWithFlattening makes them), no attention mask and
    no cache (transformers makes the block-diagonal mask then)."""
    import hal.torch
    ranges_seen = []
    original = hal.torch.mask_key_ranges
    monkeypatch.setattr(hal.torch, "mask_key_ranges", lambda *args: ranges_seen.append(original(*args)) or
                        ranges_seen[-1])
    reference, mine = pair(family)
    if side == "packed":
        ids = tokens(batch=1, seq=24)
        inputs = dict(input_ids=ids, position_ids=torch.cat((torch.arange(10), torch.arange(14))).unsqueeze(0),
                      use_cache=False)
        real = torch.ones_like(ids, dtype=torch.bool)
    else:
        ids = tokens(batch=2, seq=16)
        mask = torch.ones_like(ids)
        if side == "left":
            mask[0, :5] = 0
        else:
            mask[0, -5:] = 0
        inputs = dict(input_ids=ids, attention_mask=mask)
        real = mask.bool()
    labels = ids.masked_fill(~real, -100)
    ht.reset_counts()
    outputs = []
    for model in (reference, mine):
        out = model(**inputs, labels=labels)
        out.loss.backward()
        outputs.append((out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (ref_logits, ref_grads), (logits, grads) = outputs
    assert (logits[real] - ref_logits[real]).abs().max().item() < 2e-5
    for name, grad in grads.items():
        scale = ref_grads[name].abs().max().item() + 1e-12
        assert (grad - ref_grads[name]).abs().max().item() / scale < 2e-4, name
    counts = [ht.calls_of(m) for m in attention_modules(mine)]
    assert len(counts) == 2 and all(c == {"hal": 1} for c in counts), ht.describe(mine)
    assert ranges_seen and all(r is not None for r in ranges_seen)  # the masks ran as key ranges
    if side == "packed":  # the second document's first token sees itself only
        assert ranges_seen[-1][0, 10].tolist() == [10, 11]
    elif side == "left":  # the padded row's first real token sees itself only
        assert ranges_seen[-1][0, 5].tolist() == [5, 6]


def test_greedy_generation_equals_sdpa():
    reference, mine = pair("llama")
    prompt = tokens(batch=1, seq=8, seed=3)
    ht.reset_counts()
    settings = dict(max_new_tokens=20, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt))
    expected = reference.generate(prompt, **settings)
    got = mine.generate(prompt, **settings)
    assert torch.equal(got, expected)
    # the prefill and every decode step (one query against the cache) ran on hal
    assert all(c.get("hal", 0) == 20 for c in (ht.calls_of(m) for m in attention_modules(mine))), ht.describe(mine)


def test_set_attn_implementation_and_describe():
    reference, _ = pair("qwen2")
    reference.set_attn_implementation("hal")
    ht.reset_counts()
    reference(input_ids=tokens())
    text = ht.describe(reference)
    assert text.count("hal ran 1 call(s)") == 2, text


def test_mask_pattern_is_checked_not_assumed():
    causal = torch.ones(4, 4, dtype=torch.bool).tril().expand(2, 1, 4, 4)
    assert ht.mask_pattern(causal, 4, 4) is True
    assert ht.mask_pattern(torch.ones(2, 1, 1, 9, dtype=torch.bool), 1, 9) is False
    padded = causal.clone()
    padded[0, 0, :, 0] = False  # the first key of the first sequence is padding
    assert ht.mask_pattern(padded, 4, 4) is None  # not causal: hal.torch runs it as key ranges
    additive = torch.zeros(2, 1, 4, 4).masked_fill(~causal, torch.finfo(torch.float32).min)
    assert ht.mask_pattern(additive, 4, 4) is True
    assert ht.mask_pattern(additive + 0.5, 4, 4) is None  # a bias is not a pattern
    assert ht.mask_pattern(causal[..., :3], 4, 3) is None  # chunked prefill: bottom-right, not hal.torch's causal


def test_trainer_losses_equal_sdpa():
    """transformers' Trainer, 5 steps on a tiny Llama and synthetic data: the same losses with "hal" as with "sdpa",
    and hal ran every attention call."""
    pytest.importorskip("accelerate")

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            self.ids = torch.randint(0, 128, (20, 32), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, index):
            return {"input_ids": self.ids[index], "labels": self.ids[index]}

    def train(implementation, directory):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(FAMILIES["llama"](), attn_implementation=implementation)
        arguments = transformers.TrainingArguments(output_dir=str(directory), max_steps=5, per_device_train_batch_size=4,
                                                   logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                                                   seed=0, data_seed=0, disable_tqdm=True)
        trainer = transformers.Trainer(model=model, args=arguments, train_dataset=Data())
        trainer.train()
        return model, [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]

    import tempfile
    with tempfile.TemporaryDirectory() as directory:
        _, expected = train("sdpa", directory)
        ht.reset_counts()
        model, losses = train("hal", directory)
    assert len(losses) == 5 and losses == pytest.approx(expected, rel=1e-5)
    assert all(ht.calls_of(m) == {"hal": 5} for m in attention_modules(model)), ht.describe(model)


def test_checkpoint_optimization_plans_the_trainer_under_its_budget(monkeypatch, capfd):
    """CHECKPOINT_OPTIMIZATION=true and a budget below the unplanned peak: the Trainer's default MemoryPlanCallback
    logs a plan and checkpoints blocks, the step's measured peak of live tensors (torch's MemTracker) stays under the
    budget, and the losses are those of the run without a plan."""
    pytest.importorskip("accelerate")
    from torch.distributed._tools.mem_tracker import MemTracker
    from hal.torch import memory

    config = transformers.LlamaConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    ids = torch.randint(0, 128, (16, 128), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": row, "labels": row} for row in ids]

    class PeakOfSteps(transformers.TrainerCallback):
        """The largest peak of live tensors over the training steps (forward, backward, optimizer step), counted by
        torch's MemTracker, a new one per step (one tracks a single iteration)."""

        def __init__(self):
            self.peak, self.tracker = 0, None

        def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
            self.tracker = MemTracker()
            self.tracker.track_external(model, optimizer)
            self.tracker.__enter__()

        def on_step_end(self, args, state, control, **kwargs):
            self.tracker.__exit__(None, None, None)
            self.peak = max(self.peak, self.tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"])

    def train(directory, budget=None):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="hal")
        arguments = transformers.TrainingArguments(output_dir=str(directory), max_steps=3, per_device_train_batch_size=4,
                                                   logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                                                   seed=0, data_seed=0, disable_tqdm=True, max_grad_norm=0.0)
        if budget is not None:
            monkeypatch.setenv("CHECKPOINT_OPTIMIZATION", "true")
            monkeypatch.setenv("HAL_MEMORY_BUDGET", str(budget))
        else:
            monkeypatch.delenv("CHECKPOINT_OPTIMIZATION", raising=False)
        steps = PeakOfSteps()
        trainer = transformers.Trainer(model=model, args=arguments, train_dataset=data, callbacks=[steps])
        trainer.train()
        return model, steps.peak, [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]

    import tempfile
    with tempfile.TemporaryDirectory() as directory:
        model, unplanned_peak, expected = train(directory)
        assert not any("_hal_checkpoint" in m.__dict__ for m in model.modules())  # off without the variable
        batch = {"input_ids": ids[:4], "labels": ids[:4]}
        none = memory.estimate(model, model_kwargs=batch).peak_bytes
        full = memory.estimate(model, model_kwargs=batch, checkpoint=True).peak_bytes
        budget = (none + full) // 2
        assert full < budget < none
        model, peak, losses = train(directory, budget)
    log = capfd.readouterr().err
    assert log.count("MemoryPlanCallback (CHECKPOINT_OPTIMIZATION)") == 1 and "plan: checkpoint" in log, log
    wrapped = [name for name, m in model.named_modules() if "_hal_checkpoint" in m.__dict__]
    assert wrapped, "the plan checkpoints blocks"
    assert peak <= budget < unplanned_peak, (peak, budget, unplanned_peak)
    assert losses == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("frozen_embeddings", [False, True], ids=["trained", "frozen-embeddings"])
def test_checkpoint_optimization_with_deepspeed_fills_its_section_and_checkpoints_through_it(
        frozen_embeddings, monkeypatch, capfd):
    """CHECKPOINT_OPTIMIZATION=true, a Trainer with DeepSpeed (ZeRO stage 1 on the CPU, one process, gloo) and a
    budget below the unplanned peak: the plan fills the activation_checkpointing section of the config DeepSpeed was
    given (keeping the user's value), DeepSpeed's checkpointing is configured from it, the planned whole blocks run
    (and are recomputed) through deepspeed.checkpointing.checkpoint, and the losses and trained weights are those of
    the run without a plan, also with frozen input embeddings (as with adapters), where DeepSpeed's reentrant
    checkpoint would leave a block whose input needs no gradient without any."""
    pytest.importorskip("accelerate")
    deepspeed = pytest.importorskip(
        "deepspeed", exc_type=ImportError,
        reason="deepspeed is not importable (scripts/install-python-deps.sh installs it for CI)")
    import socket
    import tempfile
    from accelerate.state import AcceleratorState
    from hal.torch import memory

    with socket.socket() as free:  # one process: torch.distributed (gloo) on a free local port
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    # Set here so that they are undone after the test (accelerate sets the last two itself and leaves them set,
    # which would give later Trainers DeepSpeed).
    for name, value in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", LOCAL_RANK="0",
                            WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", ACCELERATE_USE_DEEPSPEED="true").items():
        monkeypatch.setenv(name, value)
    ids = torch.randint(0, 128, (16, 64), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": row, "labels": row} for row in ids]
    user_section = {"synchronize_checkpoint_boundary": True}

    through = collections.Counter()  # block -> runs of its forward inside DeepSpeed's checkpoint
    checkpoint = deepspeed.checkpointing.checkpoint

    def counted_checkpoint(forward, *inputs, **keywords):
        def counted(*arguments, **named):
            through[forward.__self__] += 1
            return forward(*arguments, **named)
        return checkpoint(counted, *inputs, **keywords)
    monkeypatch.setattr(deepspeed.checkpointing, "checkpoint", counted_checkpoint)
    given = []  # the config each deepspeed.initialize got (accelerate looks the function up when it calls it)
    initialize = deepspeed.initialize

    def recorded_initialize(*arguments, **named):
        given.append(named["config_params"])
        return initialize(*arguments, **named)
    monkeypatch.setattr(deepspeed, "initialize", recorded_initialize)
    for name in ("num_layers", "PARTITION_ACTIVATIONS", "CONTIGUOUS_CHECKPOINTING", "CPU_CHECKPOINT", "SYNCHRONIZE",
                 "PROFILE_TIME", "deepspeed_checkpointing_enabled"):  # what configure sets, restored after the test
        monkeypatch.setattr(deepspeed.checkpointing, name, getattr(deepspeed.checkpointing, name))

    def train(directory, budget=None):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(FAMILIES["llama"](), attn_implementation="hal")
        model.get_input_embeddings().requires_grad_(not frozen_embeddings)
        config = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                  "zero_optimization": {"stage": 1}, "activation_checkpointing": dict(user_section)}
        arguments = transformers.TrainingArguments(output_dir=str(directory), max_steps=3,
                                                   per_device_train_batch_size=4, logging_steps=1, report_to=[],
                                                   save_strategy="no", use_cpu=True, seed=0, data_seed=0,
                                                   learning_rate=1e-3, disable_tqdm=True, deepspeed=config)
        if budget is not None:
            monkeypatch.setenv("CHECKPOINT_OPTIMIZATION", "true")
            monkeypatch.setenv("HAL_MEMORY_BUDGET", str(budget))
        else:
            monkeypatch.delenv("CHECKPOINT_OPTIMIZATION", raising=False)
        trainer = transformers.Trainer(model=model, args=arguments, train_dataset=data)
        try:
            trainer.train()
        finally:  # the next Trainer (here or in another test) starts from a fresh accelerate state
            AcceleratorState._reset_state(reset_partial_state=True)
        callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, ht.MemoryPlanCallback))
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        weights = {name: p.detach().clone() for name, p in model.named_parameters()}
        return model, callback.plan, given[-1], losses, weights

    with tempfile.TemporaryDirectory() as directory:
        model, _, received, expected, expected_weights = train(directory)
        assert received["activation_checkpointing"] == user_section and not through
        # Under the peak of one block checkpointed whole: the plan checkpoints a block whole, through DeepSpeed's.
        batch = {"input_ids": ids[:4], "labels": ids[:4]}
        one = memory.estimate(model, model_kwargs=batch, checkpoint=["model.layers.0"]).peak_bytes
        both = memory.estimate(model, model_kwargs=batch, checkpoint=True).peak_bytes
        budget = (one + both) // 2
        assert both <= budget < one < memory.estimate(model, model_kwargs=batch).peak_bytes
        model, plan, received, losses, weights = train(directory, budget)
    log = capfd.readouterr().err
    assert plan is not None and plan.checkpoint, log
    assert "DeepSpeed config: activation_checkpointing filled with" in log and "engine was made" in log, log
    section = received["activation_checkpointing"]
    assert section == {**plan.deepspeed_config()["activation_checkpointing"], **user_section}
    assert section["number_checkpoints"] == len(plan.checkpoint)
    # DeepSpeed read the section: its checkpointing holds the plan's count and the user's value.
    assert (deepspeed.checkpointing.num_layers, deepspeed.checkpointing.SYNCHRONIZE) == (len(plan.checkpoint), True)
    # Each planned block ran twice per step inside DeepSpeed's checkpoint (forward, then recomputed in backward).
    assert through == {model.get_submodule(name): 2 * 3 for name in plan.checkpoint}
    assert losses == pytest.approx(expected, rel=1e-5)
    torch.testing.assert_close(weights, expected_weights)
