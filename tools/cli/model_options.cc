#include "tools/cli/model_options.h"

#include "absl/strings/str_cat.h"
#include "examples/models/gpt.h"
#include "tools/cli/command_line.h"

namespace tandem::cli {

void AddModelOptions(CLI::App& command, examples::ExampleJobOptions& options) {
  command.add_option("--model", options.model, "example model")
      ->check(CLI::IsMember({"gpt", "llama", "mlp", "two-tower"}))
      ->capture_default_str();
  command
      .add_option("--preset", options.preset,
                  "gpt: a well-known model's shapes (gpt2-small: 12 layers, d=768, 12 heads, seq 1024, vocab 50257; "
                  "gpt-1.3b: 24 layers, d=2048, 16 heads, seq 2048, vocab 50257; both with a tied head); the "
                  "sizes given beside it override it")
      ->check(CLI::IsMember(examples::GptPresetNames()));
  AddIntegerOption(command, "--stages", options.stages, "pipeline stages the model is split into (a schedule sets it)");
  AddIntegerOption(command, "--microbatches", options.microbatches, "microbatches per step (per replica)");
  AddIntegerOption(command, "--data-parallel", options.replicas,
                   "data-parallel replicas of the pipeline: D x P actors, a step's batch is D x M microbatches");
  command
      .add_option("--layers", options.layers,
                  "decoder blocks (gpt and llama, default 4), hidden layers (mlp, default 4; at least the stage count) or "
                  "the head's layers (two-tower, default 3)")
      ->check(AtLeast(options.layers, 1));
  command
      .add_option("--towers", options.towers,
                  "two-tower: the layers of its left and right towers, e.g. 4,3 (the default)")
      ->delimiter(',')
      ->expected(2);
  command.add_option("--dim", options.dim, "model width (gpt and llama d_model, default 64; mlp and two-tower hidden width, default 64)")
      ->check(AtLeast(options.dim, 1));
  command.add_option("--heads", options.heads, "attention heads (gpt and llama, default 4)")
      ->check(AtLeast(options.heads, 1));
  command
      .add_option("--kv-heads", options.kv_heads,
                  "llama: key/value heads, dividing --heads (grouped-query attention; default half the heads)")
      ->check(AtLeast(options.kv_heads, 1));
  command
      .add_option("--mlp-hidden", options.mlp_hidden,
                  "llama: the SwiGLU's hidden width (default LLaMA's rule: 2/3 of 4 x --dim, rounded up to 32)")
      ->check(AtLeast(options.mlp_hidden, 1));
  command.add_option("--rope-theta", options.rope_theta, "llama: the rotary embedding's base (default 10000)")
      ->check(CLI::PositiveNumber);
  command.add_option("--norm-eps", options.norm_eps, "llama: RMSNorm's epsilon (default 1e-5)")
      ->check(CLI::PositiveNumber);
  command.add_option("--seq", options.seq, "sequence length (gpt and llama, default 32)")->check(AtLeast(options.seq, 1));
  command
      .add_option("--batch", options.batch, "sequences (gpt and llama, default 8) or examples (mlp and two-tower, default 16) per microbatch")
      ->check(AtLeast(options.batch, 1));
  command.add_option("--vocab", options.vocab, "gpt and llama: the LM head's width (default: the corpus's characters)")
      ->check(AtLeast(options.vocab, 1));
  command.add_flag("--tied", options.tied, "tie the gpt or llama LM head to the token embedding");
  command
      .add_option_function<std::string>(
          "--precision", [&options](const std::string& name) { options.precision = *ir::ParseDType(name); },
          "gpt and llama: f32, or bf16 for mixed precision (bf16 activations and weight copies; f32 master weights, "
          "optimizer state, gradient accumulation and loss)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  command
      .add_option_function<std::string>(
          "--attention", [&options](const std::string& name) { options.attention = *layers::ParseAttentionImpl(name); },
          "gpt and llama: fused (the attention op: a query row at a time, no T x T scores kept; the default), or "
          "composed (matmul, causal_mask, softmax: the graph before the fused op, for comparison)")
      ->check(CLI::IsMember({"fused", "composed"}));
  command.add_option("--optimizer", options.optimizer, "adam, or sgd (momentum 0.9)")
      ->check(CLI::IsMember({"adam", "sgd"}))
      ->capture_default_str();
  command.add_option("--lr", options.lr, "learning rate (default 3e-3 for gpt and llama, 1e-2 for mlp and two-tower)");
  command.add_option("--weight-decay", options.weight_decay,
                     "adam: AdamW's decoupled weight decay (norm gains and biases never decay; embeddings only with "
                     "--decay-embeddings)")
      ->check(CLI::NonNegativeNumber);
  command.add_option("--clip-grad-norm", options.clip_grad_norm,
                     "clip the gradients to this global norm, over every stage and replica (0: no clipping)")
      ->check(CLI::NonNegativeNumber);
  command.add_flag("--decay-embeddings", options.decay_embeddings, "with --weight-decay: the embeddings decay too");
  command.add_option("--warmup-steps", options.schedule.warmup_steps,
                     "steps of linear learning-rate warmup from 0 (computed in the traced step)")
      ->check(CLI::NonNegativeNumber);
  command
      .add_option_function<std::string>(
          "--lr-schedule",
          [&options](const std::string& name) { options.schedule.decay = *ParseDecay(name); },
          "learning-rate decay after the warmup: constant, linear or cosine (to --min-lr at --decay-steps)")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}));
  command.add_option("--decay-steps", options.schedule.decay_steps,
                     "the step where a decay reaches --min-lr (tandem train: default --steps)")
      ->check(CLI::PositiveNumber);
  command.add_option("--min-lr", options.min_lr, "where a decay ends (default: --lr / 10)")
      ->check(CLI::NonNegativeNumber);
  command.add_option("--seed", options.seed, "seed of parameter initialization and data sampling")
      ->capture_default_str();
  AddIntegerOption(command, "--update-every", options.updates.every,
                   "2bw: microbatches per weight update, dividing --microbatches (default: the pipeline's stages)");
  command.add_option("--tokenizer", options.tokenizer,
                     "gpt and llama: a SentencePiece .model (`tandem tokenize --train`); --data is then a token file "
                     "of its ids (`tandem tokenize`)");
  command.add_option("--data", options.data,
                     "gpt and llama: a UTF-8 text file or directory (default: /usr/share/common-licenses)");
}

absl::Status TakeScheduleStages(const CLI::App& command, int32_t stages, examples::ExampleJobOptions& options) {
  if (command.count("--stages") > 0 && options.stages != stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stages ", options.stages, " does not match the schedule's ", stages, " stages"));
  }
  options.stages = stages;
  return absl::OkStatus();
}

absl::Status TakeWeightUpdates(const CLI::App& command, const std::string& schedule,
                               examples::ExampleJobOptions& options) {
  const bool every_given = command.count("--update-every") > 0;
  if (schedule == "pipedream") {
    if (every_given && options.updates.every != 1) {
      return absl::InvalidArgumentError("--update-every: pipedream updates after every microbatch; use 2bw to update "
                                        "every N");
    }
    options.updates = {WeightUpdates::Mode::kPipeDream, 1};
  } else if (schedule == "2bw") {
    const int32_t every = every_given ? options.updates.every : options.stages;
    if (every < 1 || options.microbatches % every != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "2bw updates every ", every, " microbatches", every_given ? "" : " (the stage count, by default)",
          ", which must divide --microbatches ", options.microbatches, ": set --update-every"));
    }
    options.updates = {WeightUpdates::Mode::kTwoBuffer, every};
  } else if (every_given) {
    return absl::InvalidArgumentError(absl::StrCat("--update-every applies to --schedule 2bw, not '", schedule, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<schedules::Schedule> ResolveModelSchedule(
    const CLI::App& command, const ScheduleOptions& schedule, examples::ExampleJobOptions& model,
    const std::function<absl::StatusOr<const ir::TrainStep*>()>& trace, bool& usage_error) {
  usage_error = false;
  std::optional<schedules::Schedule> early;
  int32_t stages = schedule.actors;  // a graph generator: one stage per actor
  if (!FollowsModelGraph(schedule)) {
    absl::StatusOr<schedules::Schedule> resolved = ResolveSchedule(schedule, model.microbatches);
    if (!resolved.ok()) return resolved.status();
    stages = resolved->num_stages;
    early = *std::move(resolved);
  }
  if (absl::Status status = TakeScheduleStages(command, stages, model); !status.ok()) {
    usage_error = true;
    return status;
  }
  if (absl::Status status = TakeWeightUpdates(command, schedule.schedule, model); !status.ok()) {
    usage_error = true;
    return status;
  }
  absl::StatusOr<const ir::TrainStep*> step = trace();
  if (!step.ok()) return step.status();
  if (early.has_value()) return *std::move(early);
  return ResolveSchedule(schedule, model.microbatches, (*step)->stage_edges);
}

absl::StatusOr<schedules::Schedule> ResolveModelSchedule(const CLI::App& command, const ScheduleOptions& schedule,
                                                         examples::ExampleJobOptions& model,
                                                         std::optional<examples::ExampleJob>& job,
                                                         bool& usage_error) {
  return ResolveModelSchedule(
      command, schedule, model,
      [&]() -> absl::StatusOr<const ir::TrainStep*> {
        absl::StatusOr<examples::ExampleJob> made = examples::MakeExampleJob(model);
        if (!made.ok()) return made.status();
        job = *std::move(made);
        return &job->step;
      },
      usage_error);
}

absl::StatusOr<controller::GenerationSteps> TraceGenerationSteps(const examples::ExampleJobOptions& model) {
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(model);
  if (!job.ok()) return job.status();
  if (!job->cached_logits) {
    return absl::InvalidArgumentError(absl::StrCat("generation needs a language model (gpt or llama), not ",
                                                   model.model));
  }
  const examples::CachedModelFunction logits = job->cached_logits;
  const TraceOptions trace{.num_microbatches = model.microbatches, .seed = model.seed};
  controller::GenerationSteps steps;
  for (const layers::KvCache::Mode mode : {layers::KvCache::Mode::kPrefill, layers::KvCache::Mode::kDecode}) {
    const bool decode = mode == layers::KvCache::Mode::kDecode;
    absl::StatusOr<ir::TrainStep> step =
        TraceForwardStep(decode ? "decode" : "prefill", [&](Tracer& t) { return logits(t, mode); }, trace);
    if (!step.ok()) return step.status();
    (decode ? steps.decode : steps.prefill) = *std::move(step);
  }
  return steps;
}

examples::ExampleJobOptions WholeModelOptions(examples::ExampleJobOptions options, int64_t batch) {
  options.batch = batch;
  options.microbatches = 1;
  options.replicas = 1;
  options.stages = 1;
  options.layer_stages.clear();
  return options;
}

}  // namespace tandem::cli
