// tandem._tandem: a thin pybind11 layer over the controller API
// (<tandem/tandem.h>) and the example jobs (<tandem/examples.h>). Every call
// maps to one C++ call; tensors cross as numpy arrays (copied); a failing
// absl::Status becomes a Python exception whose text is "CODE: message".
// The GIL is released while actors work.
// The typed surface is python_stub/tandem/__init__.pyi.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/initial_state.h"
#include "ir/limits.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/read_file.h"
#include "ir/stage_graph.h"
#include "ir/state_file.h"
#include "schedules/generators.h"
#include "schedules/limits.h"
#include "tandem/examples.h"
#include "tandem/tandem.h"

namespace py = pybind11;

namespace tandem::python {
namespace {

[[noreturn]] void Raise(const absl::Status& status) {
  const std::string text = std::string(absl::StatusCodeToString(status.code())) + ": " + std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      throw py::value_error(text);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, text.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(text);
  }
}

void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Value(absl::StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return *std::move(value);
}

py::array ToNumpy(const ir::HostTensor& tensor) {
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  switch (tensor.dtype()) {
    case ir::DType::kF32: {
      py::array_t<float> array(shape);
      std::memcpy(array.mutable_data(), tensor.data(), static_cast<size_t>(tensor.num_bytes()));
      return array;
    }
    case ir::DType::kI32: {
      py::array_t<int32_t> array(shape);
      std::memcpy(array.mutable_data(), tensor.data(), static_cast<size_t>(tensor.num_bytes()));
      return array;
    }
    default:
      throw py::type_error(std::string("tensors of dtype ") + ir::DTypeName(tensor.dtype()) +
                           " do not cross into Python yet");
  }
}

// Runs `work` (actors' work: steps, starts, checkpoints) with the GIL
// released; its status is turned into an exception only after the GIL is
// back.
template <typename Work>
auto WithoutGil(Work work) {
  py::gil_scoped_release release;
  return work();
}

// Floating arrays become f32, integer arrays i32 (C order, copied).
ir::HostTensor FromNumpy(const std::string& name, const py::array& array) {
  const char kind = array.dtype().kind();
  ir::Shape shape(array.shape(), array.shape() + array.ndim());
  if (kind == 'f') {
    auto values = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array);
    ir::HostTensor tensor(ir::TensorType{ir::DType::kF32, shape});
    std::memcpy(tensor.data(), values.data(), static_cast<size_t>(tensor.num_bytes()));
    return tensor;
  }
  if (kind == 'i' || kind == 'u') {
    auto values = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(array);
    ir::HostTensor tensor(ir::TensorType{ir::DType::kI32, shape});
    std::memcpy(tensor.data(), values.data(), static_cast<size_t>(tensor.num_bytes()));
    return tensor;
  }
  throw py::type_error("input '" + name + "' must be a float or integer numpy array");
}

using PyTensorMap = std::map<std::string, py::array>;

PyTensorMap ToPython(const ir::TensorMap& tensors) {
  PyTensorMap out;
  for (const auto& [name, tensor] : tensors) out.emplace(name, ToNumpy(tensor));
  return out;
}

std::vector<PyTensorMap> ToPython(const std::vector<ir::TensorMap>& batch) {
  std::vector<PyTensorMap> out;
  for (const ir::TensorMap& microbatch : batch) out.push_back(ToPython(microbatch));
  return out;
}

std::vector<ir::TensorMap> FromPython(const std::vector<PyTensorMap>& batch) {
  std::vector<ir::TensorMap> out;
  for (const PyTensorMap& microbatch : batch) {
    ir::TensorMap tensors;
    for (const auto& [name, array] : microbatch) tensors.emplace(name, FromNumpy(name, array));
    out.push_back(std::move(tensors));
  }
  return out;
}

// An example job, held by Python (the batch functions own their data).
struct PyExampleJob {
  std::shared_ptr<examples::ExampleJob> job;
};

// The weight updates `updates` names ("flush", "pipedream" or "2bw", as
// the schedules of those names need), every `update_every` microbatches
// for 2bw (0: the stage count).
WeightUpdates MakeUpdates(const std::string& updates, int32_t update_every, int32_t stages, int32_t microbatches) {
  if (updates != "flush" && !schedules::IsAsynchronous(updates)) {
    throw py::value_error("updates is 'flush', 'pipedream' or '2bw', not '" + updates + "'");
  }
  const schedules::WeightUpdateMode mode =
      updates == "flush" ? schedules::WeightUpdateMode::kFlush : schedules::WeightUpdateModeOf(updates);
  if (mode == schedules::WeightUpdateMode::kPipeDream) {
    if (update_every > 1) throw py::value_error("pipedream updates after every microbatch; use updates='2bw' for N");
    return {WeightUpdates::Mode::kPipeDream, 1};
  }
  if (mode == schedules::WeightUpdateMode::kTwoBuffer) {
    const int32_t every = update_every > 0 ? update_every : stages;
    if (microbatches % every != 0) {
      throw py::value_error("2bw updates every " + std::to_string(every) + " microbatches" +
                            (update_every > 0 ? "" : " (the stage count, by default)") +
                            ", which must divide microbatches " + std::to_string(microbatches) + ": set update_every");
    }
    return {WeightUpdates::Mode::kTwoBuffer, every};
  }
  if (update_every != 0) throw py::value_error("update_every applies to updates='2bw'");
  return {};
}

SessionOptions MakeOptions(const std::string& transport, const std::string& dispatch, double receive_timeout_s,
                           int32_t max_restarts) {
  SessionOptions options;
  if (max_restarts < 0) throw py::value_error("max_restarts is a count, at least 0");
  options.max_restarts = max_restarts;
  absl::StatusOr<ir::DataPlaneKind> data_plane = ir::ParseDataPlaneKind(transport);
  if (!data_plane.ok()) throw py::value_error(std::string(data_plane.status().message()));
  options.data_plane = *data_plane;
  if (dispatch == "per-task") {
    options.dispatch = controller::Dispatch::kPerTask;
  } else if (dispatch != "fused") {
    throw py::value_error("dispatch is 'fused' or 'per-task', not '" + dispatch + "'");
  }
  options.receive_timeout = absl::Seconds(receive_timeout_s);
  return options;
}

}  // namespace
}  // namespace tandem::python

PYBIND11_MODULE(_tandem, m) {
  using namespace tandem;          // NOLINT: the module body names much of it
  using namespace tandem::python;  // NOLINT
  m.doc() = "Tandem: pipeline-parallel training on actor processes (the C++ controller API, thinly).";

  py::class_<ir::TrainStep>(m, "TrainStep", "A traced, differentiated training step.")
      .def_readonly("name", &ir::TrainStep::name)
      .def_readonly("num_stages", &ir::TrainStep::num_stages)
      .def_readonly("num_microbatches", &ir::TrainStep::num_microbatches)
      .def_readonly("num_replicas", &ir::TrainStep::num_replicas)
      .def_property_readonly("microbatches_per_update", &ir::TrainStep::group_size)
      .def_property_readonly("version_delays",
                             [](const ir::TrainStep& step) {
                               std::vector<int32_t> delays;
                               for (int32_t s = 0; s < step.num_stages; ++s) delays.push_back(step.VersionDelay(s));
                               return delays;
                             })
      .def_property_readonly("stage_graph",
                             [](const ir::TrainStep& step) { return ir::FormatStageEdges(step.stage_edges); })
      .def_property_readonly("state_names",
                             [](const ir::TrainStep& step) {
                               std::vector<std::string> names;
                               for (const ir::StateSpec& spec : step.state) names.push_back(spec.name);
                               return names;
                             })
      .def("to_text", [](const ir::TrainStep& step) { return ir::PrintTrainStep(step); },
           "The step in the IR's text form (what load_step reads).")
      .def("initial_state", [](const ir::TrainStep& step) { return ToPython(Value(ir::InitialState(step))); })
      .def("__repr__", [](const ir::TrainStep& step) {
        return "<TrainStep " + step.name + ": " + std::to_string(step.num_stages) + " stages, " +
               std::to_string(step.num_microbatches) + " microbatches, " + std::to_string(step.state.size()) +
               " state tensors>";
      });

  m.def(
      "load_step",
      [](const std::string& path) {
        std::string text = Value(ir::ReadFileUpTo(path, ir::kMaxIrTextBytes, path));
        return Value(ir::ParseTrainStep(text, path));
      },
      py::arg("path"), "Reads a traced step from its IR text file (`tandem ir dump` writes one).");

  py::class_<PyExampleJob>(m, "ExampleJob", "A built-in example model (gpt, llama, mlp or two-tower) with its data.")
      .def(py::init([](const std::string& model, int32_t stages, int32_t microbatches, int32_t data_parallel,
                       std::optional<int64_t> layers, std::vector<int64_t> towers,
                       std::optional<int64_t> dim, std::optional<int64_t> heads, std::optional<int64_t> seq,
                       std::optional<int64_t> batch, const std::string& optimizer, std::optional<double> lr,
                       uint64_t seed, std::optional<std::string> data, const std::string& updates,
                       int32_t update_every) {
             examples::ExampleJobOptions options{.model = model, .stages = stages, .microbatches = microbatches,
                                                 .replicas = data_parallel, .layers = layers, .dim = dim,
                                                 .towers = std::move(towers), .heads = heads, .seq = seq,
                                                 .batch = batch, .optimizer = optimizer, .lr = lr, .seed = seed,
                                                 .data = data};
             options.updates = MakeUpdates(updates, update_every, stages, microbatches);
             return PyExampleJob{std::make_shared<examples::ExampleJob>(Value(examples::MakeExampleJob(options)))};
           }),
           py::kw_only(), py::arg("model") = "gpt", py::arg("stages") = 1, py::arg("microbatches") = 4,
           py::arg("data_parallel") = 1, py::arg("layers") = py::none(), py::arg("towers") = std::vector<int64_t>{},
           py::arg("dim") = py::none(), py::arg("heads") = py::none(),
           py::arg("seq") = py::none(), py::arg("batch") = py::none(), py::arg("optimizer") = "adam",
           py::arg("lr") = py::none(), py::arg("seed") = 1, py::arg("data") = py::none(),
           py::arg("updates") = "flush", py::arg("update_every") = 0)
      .def_property_readonly("description", [](const PyExampleJob& self) { return self.job->description; })
      .def_property_readonly("step", [](const PyExampleJob& self) { return self.job->step; })
      .def("train_batch",
           [](const PyExampleJob& self, uint64_t index) { return ToPython(Value(self.job->train_batch(index))); },
           py::arg("index"))
      .def("validation_batch",
           [](const PyExampleJob& self, uint64_t index) { return ToPython(Value(self.job->validation_batch(index))); },
           py::arg("index"));

  py::class_<schedules::Schedule>(m, "Schedule", "A pipeline schedule: a task list per actor.")
      .def(py::init([](const std::string& name_or_file, int32_t actors, int32_t microbatches, int32_t virtual_stages,
                       const std::string& stage_graph) {
             const std::vector<ir::StageEdge> edges = Value(ir::ParseStageEdges(stage_graph, schedules::kMaxStageEdges));
             return Value(schedules::ResolveSchedule(name_or_file, actors, microbatches, virtual_stages, edges));
           }),
           py::arg("name_or_file"), py::kw_only(), py::arg("actors"), py::arg("microbatches"),
           py::arg("virtual_stages") = 0, py::arg("stage_graph") = "")
      .def_property_readonly("stage_graph",
                             [](const schedules::Schedule& s) { return ir::FormatStageEdges(s.stage_edges); })
      .def_readonly("name", &schedules::Schedule::name)
      .def_readonly("num_actors", &schedules::Schedule::num_actors)
      .def_readonly("num_stages", &schedules::Schedule::num_stages)
      .def_readonly("num_microbatches", &schedules::Schedule::num_microbatches);

  py::class_<Session>(m, "Session", "A compiled step running on actor processes.")
      .def_static(
          "start",
          [](const ir::TrainStep& step, const schedules::Schedule& schedule, const std::string& transport,
             const std::string& dispatch, double receive_timeout_s, int32_t max_restarts) {
            SessionOptions options = MakeOptions(transport, dispatch, receive_timeout_s, max_restarts);
            return Value(WithoutGil([&] { return Session::Start(step, schedule, std::move(options)); }));
          },
          py::arg("step"), py::arg("schedule"), py::kw_only(), py::arg("transport") = "shm",
          py::arg("dispatch") = "fused", py::arg("receive_timeout_s") = 30.0, py::arg("max_restarts") = 0)
      .def_static(
          "resume",
          [](const ir::TrainStep& step, const schedules::Schedule& schedule, const std::string& checkpoint,
             const std::string& transport, const std::string& dispatch, double receive_timeout_s,
             int32_t max_restarts) {
            SessionOptions options = MakeOptions(transport, dispatch, receive_timeout_s, max_restarts);
            return Value(
                WithoutGil([&] { return Session::Resume(step, schedule, checkpoint, std::move(options)); }));
          },
          py::arg("step"), py::arg("schedule"), py::arg("checkpoint"), py::kw_only(), py::arg("transport") = "shm",
          py::arg("dispatch") = "fused", py::arg("receive_timeout_s") = 30.0, py::arg("max_restarts") = 0)
      .def(
          "step",
          [](Session& self, const std::vector<PyTensorMap>& microbatches) {
            std::vector<ir::TensorMap> batch = FromPython(microbatches);
            return Value(WithoutGil([&] { return self.Step(batch); })).losses;
          },
          py::arg("microbatches"), "Runs the next training step; returns each microbatch's loss.")
      .def("state", [](Session& self) { return ToPython(Value(WithoutGil([&] { return self.State(); }))); })
      .def(
          "save_checkpoint",
          [](Session& self, const std::string& root) {
            return Value(WithoutGil([&] { return self.SaveCheckpoint(root); }));
          },
          py::arg("root"))
      .def(
          "begin_checkpoint",
          [](Session& self, const std::string& root) {
            Check(WithoutGil([&] { return self.BeginCheckpoint(root); }));
          },
          py::arg("root"), "Starts a checkpoint that the actors write behind the next steps.")
      .def(
          "finish_checkpoint",
          [](Session& self, bool wait) { return Value(WithoutGil([&] { return self.FinishCheckpoint(wait); })); },
          py::arg("wait") = true,
          "Puts the checkpoint begun last in place once its files are written: its directory, or '' (none "
          "pending, or not written yet without wait).")
      .def_property_readonly("restarts",
                             [](const Session& self) {
                               std::vector<std::string> lines;
                               for (const SessionRestart& restart : self.restarts()) {
                                 lines.push_back(restart.Describe());
                               }
                               return lines;
                             })
      .def(
          "set_schedule",
          [](Session& self, const schedules::Schedule& schedule) {
            Check(WithoutGil([&] { return self.SetSchedule(schedule); }));
          },
          py::arg("schedule"))
      .def_property_readonly("steps_done", &Session::steps_done)
      .def_property_readonly("num_actors", [](const Session& self) { return self.compiled().num_actors; })
      .def_property_readonly("static_peak_bytes", [](const Session& self) {
        std::vector<int64_t> peaks;
        const controller::CompiledStep& compiled = self.compiled();
        for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
          peaks.push_back(compiled.ProgramOf(actor).static_peak_bytes);
        }
        return peaks;
      });

  m.def("find_actor_binary", &FindActorBinary, "Where tandem-actor is (see FindActorBinary in controller/session.h).");
}
