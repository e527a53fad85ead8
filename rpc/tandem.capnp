# Tandem's control plane: the controller and its actors, one Cap'n Proto
# two-party connection per actor: a Unix socket in a private run directory
# (one host), or TCP (across hosts). Nothing here carries the job's token:
# actors prove they hold it by answering a challenge (rpc/auth.h).
#
# Only small tensors travel here whole (step inputs, losses); activations
# and gradients move on the data plane, and state, whatever its size, is
# generated or read by the actors themselves or moves in pieces of at most
# 4 MiB (TensorPiece). Every call is bounded by the connection's
# message-size limit (rpc/connection.h).
#
# Errors: a server method fails with a FAILED exception whose text starts
# with "tandem:<ABSL_CODE>: " (rpc/status_convert.h); clients map it back to
# an absl::Status. A lost peer is a DISCONNECTED exception -> Unavailable.
@0xd9a71ca1f193b055;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::rpc::wire");

enum DType {
  f32 @0;
  i32 @1;
  bf16 @2;
  f16 @3;
}

struct TensorType {
  dtype @0 :DType;
  shape @1 :List(Int64);
}

# A dense tensor: row-major bytes; byte count must equal the shape's.
struct Tensor {
  type @0 :TensorType;
  data @1 :Data;
}

# Bytes [offset, offset + data.size) of a tensor of `type`'s row-major
# bytes: how a tensor larger than a control message crosses the control
# plane, one piece of at most ir::kStatePieceBytes (4 MiB) per call, in
# order (rpc/tensor_pieces.h).
struct TensorPiece {
  type @0 :TensorType;
  offset @1 :UInt64;
  data @2 :Data;
}

# A seeded initializer (ir/train_step.h's Initializer).
struct Initializer {
  kind @0 :Kind;
  a @1 :Float64;
  b @2 :Float64;
  seed @3 :UInt64;
  enum Kind {
    zeros @0;
    ones @1;
    normal @2;
    uniform @3;
  }
}

# Where an actor gets one state tensor (ir/state_source.h): it generates it,
# reads it from a state file it can reach (the bytes of `type` at `offset`),
# or takes the tensor staged under its binding by stageState.
struct StateSource {
  binding @0 :Text;
  type @1 :TensorType;
  union {
    initializer @2 :Initializer;
    file @3 :StateFileSlice;
    staged @4 :Void;
  }
}

struct StateFileSlice {
  path @0 :Text;
  offset @1 :UInt64;
}

# A step input: the ActorProgram's input binding ("tokens", "step", ...) and
# the microbatch it belongs to (-1 for per-step inputs such as "step").
struct NamedTensor {
  name @0 :Text;
  microbatch @1 :Int32;
  tensor @2 :Tensor;
}

# A step result reported by an emit instruction (e.g. "loss" for microbatch 3).
struct NamedResult {
  name @0 :Text;
  microbatch @1 :Int32;
  tensor @2 :Tensor;
}

# Measured time of one instruction, relative to the start of the call. The
# call's start itself comes back as `startNanos`: the actor's monotonic clock
# (CLOCK_MONOTONIC), comparable between actors of one host.
struct InstructionTiming {
  instruction @0 :Int32;
  startNanos @1 :Int64;
  durationNanos @2 :Int64;
}

# --- The compiled program (ir/actor_program.h), as plain data. ------------

# A function graph in its textual IR form (ir/printer.h, ir/parser.h): the
# closed op set, never code.
struct Function {
  name @0 :Text;
  graphText @1 :Text;
}

enum BufferKind {
  state @0;
  input @1;
  temporary @2;
}

struct Buffer {
  name @0 :Text;
  type @1 :TensorType;
  kind @2 :BufferKind;
  binding @3 :Text;
  microbatch @4 :Int32;
}

enum InstructionKind {
  run @0;
  send @1;
  receive @2;
  accumulate @3;
  free @4;
  emit @5;
  allReduceStart @6;
  allReduceWait @7;
  fill @8;
}

struct TaskLabel {
  kind @0 :UInt8;  # ASCII 'F', 'B', 'I', 'W', 'U' or 'X' (fill)
  stage @1 :Int32;
  microbatch @2 :Int32;
}

struct Instruction {
  kind @0 :InstructionKind;
  task @1 :TaskLabel;
  function @2 :Int32;
  inputs @3 :List(Int32);
  outputs @4 :List(Int32);
  buffers @5 :List(Int32);
  peer @6 :Int32;
  tag @7 :UInt64;
  result @8 :Text;
  microbatch @9 :Int32;
  group @10 :List(Int32);  # allReduceStart/allReduceWait: actors in replica order
}

struct ActorProgram {
  actor @0 :Int32;
  numActors @1 :Int32;
  functions @2 :List(Function);
  buffers @3 :List(Buffer);
  instructions @4 :List(Instruction);
  taskStarts @5 :List(Int32);
  staticPeakBytes @6 :Int64;
  numReplicas @7 :Int32 = 1;  # data-parallel replicas running this same program
}

# --- Capabilities. --------------------------------------------------------

# A shared-memory ring of the data plane. It carries no methods: its file
# descriptor (a memfd) travels attached to the message that carries the
# capability, over the Unix socket of the control connection, and is read
# back with Capability::Client::getFd().
interface SharedRegion {}

# The ring an actor writes to one peer.
# Over a TCP control connection, which carries no descriptors, `path` names
# the ring instead (/proc/PID/fd/FD of its maker), for a peer on the same
# host to open.
struct OutboundRegion {
  peer @0 :Int32;
  region @1 :SharedRegion;
  path @2 :Text;
}

# How the callee reaches `actor` on the data plane: a TCP address, or a
# ring (as a descriptor or a path), by the job's transport and, with
# transport `auto`, by whether the two actors share a host.
struct DataPlanePeer {
  actor @0 :Int32;
  tcpAddress @1 :Text;       # "host:port" where `actor` accepts (TCP)
  region @2 :SharedRegion;   # the ring `actor` writes to the callee (shared memory)
  regionPath @3 :Text;       # that ring as a path (a TCP control connection)
  sharesDevice @4 :Bool;     # device-resident actors on one device: device tensors go by CUDA IPC
}

enum HealthState {
  idle @0;      # registered, waiting for work
  running @1;   # a step or range is executing
  failed @2;    # a step failed; `message` says why
}

# Exported by each actor and handed to the controller at registration. The
# controller is the only client; calls arrive on the actor's event-loop
# thread and are completed by it (compute happens on another thread).
interface Actor {
  # Caches `program` under `hash`; fails (INVALID_ARGUMENT) unless it
  # decodes, verifies and hashes to `hash`.
  loadProgram @0 (hash :UInt64, program :ActorProgram) -> ();

  # Runs the whole instruction stream of the program cached under
  # `programHash` for step `stepId`: ONE call per actor per step.
  runStep @1 (stepId :UInt64, programHash :UInt64, inputs :List(NamedTensor))
      -> (results :List(NamedResult), peakLiveBytes :Int64,
          timings :List(InstructionTiming), startNanos :Int64, devicePeakBytes :Int64,
          inputsNanos :Int64, settleNanos :Int64);

  # Runs instructions [begin, end) of the cached program within step
  # `stepId` (per-task dispatch, for measurement). The first range of a step
  # carries its inputs.
  runRange @2 (stepId :UInt64, programHash :UInt64, begin :Int32, end :Int32,
               inputs :List(NamedTensor))
      -> (results :List(NamedResult), timings :List(InstructionTiming),
          peakLiveBytes :Int64, startNanos :Int64, devicePeakBytes :Int64,
          inputsNanos :Int64, settleNanos :Int64);

  # Bytes [offset, offset + min(maxBytes, 4 MiB)) of the current tensor of
  # buffer `name`: a state binding, or any buffer of the program by its name
  # (e.g. "%26@0"); the piece says the tensor's type, so the reader learns
  # its size from the first. NOT_FOUND if there is none, FAILED_PRECONDITION
  # if it holds nothing now, OUT_OF_RANGE for an offset past its end.
  readBuffer @3 (name :Text, offset :UInt64, maxBytes :UInt64) -> (piece :TensorPiece);

  # `refusedConnections`: how many strangers this actor's TCP data plane
  # has refused so far (a wrong or missing answer to its challenge).
  health @4 () -> (state :HealthState, message :Text, refusedConnections :UInt64);

  # Asks the actor to exit after replying.
  shutdown @5 () -> ();

  # Replaces the actor's state (parameters, optimizer slots) with the
  # tensors `sources` name, by binding (entries the program does not bind
  # are ignored): the initial state (generated here from seeds), a
  # checkpoint (read here from its files), or recovery after a failed step.
  # A `staged` source takes the tensor stageState assembled; every staged
  # tensor is dropped afterwards, used or not. Fails (INVALID_ARGUMENT) for a
  # missing or mistyped state buffer, FAILED_PRECONDITION for a staged source
  # whose tensor did not arrive whole; the state is unchanged then.
  loadState @6 (sources :List(StateSource)) -> ();

  # Adds one piece to the tensor staged under `binding` for the next
  # loadState. Pieces of one tensor come in order, the first at offset 0
  # (it allocates the tensor of the piece's type); INVALID_ARGUMENT for a
  # piece that does not continue the tensor or changes its type.
  stageState @12 (binding :Text, piece :TensorPiece) -> ();

  # Data-plane setup, once, before the first step. openDataPlane returns
  # what peers need: the TCP address this actor accepts on, or the rings it
  # writes to each peer (as descriptors). The controller then hands every
  # actor its peers with connectDataPlane, which returns once this actor can
  # reach all of them (TCP: connected both ways; shared memory: every
  # inbound ring mapped and checked). FAILED_PRECONDITION for an actor whose
  # data plane needs no setup or was set up already.
  openDataPlane @7 () -> (tcpAddress :Text, regions :List(OutboundRegion));
  connectDataPlane @8 (peers :List(DataPlanePeer), timeoutMillis :Int64) -> ();

  # Checkpointing, in two calls, so that the steps go on while the files
  # are written. snapshotState takes the actor's state (what readBuffer
  # reads) as it is after any call posted before it, into host tensors no
  # later step changes, and returns; the actor writes it to `path` in the
  # background as one state file (ir/state_file.h), atomically (temporary
  # file, fsync, rename, fsync of the directory), after the write before
  # it, if any, has ended (one at a time). awaitState tells that write's
  # outcome: with `wait`, once it ended; without, at once (done false while
  # it runs). Done, the file's size and CRC-32 for the controller's
  # manifest; OUT_OF_RANGE for a state that is not finite (nothing is
  # written); UNAVAILABLE (with the path and the OS's reason) if it cannot
  # write; NOT_FOUND if `path` is not the latest write.
  snapshotState @9 (path :Text) -> ();
  awaitState @13 (path :Text, wait :Bool) -> (done :Bool, bytes :UInt64, checksum :Text);

  # Data parallelism: this actor's replica group, set up once before the
  # first step in two rounds, like the data plane, so that the collective
  # library's rendezvous is served by the controller. openReplicaGroup
  # (`group`: the group's actor ids in replica order, this actor among
  # them) returns, per member, what that member needs to reach this one
  # (empty for itself); connectReplicaGroup hands over, per member, what it
  # offered this one, and returns once every member is connected.
  # FAILED_PRECONDITION out of order or when called twice; INVALID_ARGUMENT
  # for a malformed group or offer.
  openReplicaGroup @10 (group :List(Int32)) -> (offers :List(Data));
  connectReplicaGroup @11 (offers :List(Data), timeoutMillis :Int64) -> ();
}

# The controller's record of one registered actor. Dropping it (or the
# connection) ends the registration.
interface ActorSession {
  actorId @0 () -> (actorId :Int32);
}

# The controller's bootstrap capability. An actor dials the controller,
# proves it belongs to the job and hands over its Actor capability; the
# controller then drives it through `actor`.
#
# The proof is a challenge-response over the job's token, which never
# travels, made both ways (rpc/auth.h). `challenge` takes the actor's id
# and a fresh nonce of its own (32 bytes) and returns the controller's proof
# = HMAC-SHA256(token, actor's nonce || actorId (4 bytes, big-endian) ||
# "tandem control-plane controller v1"), which the actor checks before it
# hands anything over, and a fresh random nonce (32 bytes, good for one
# `register` within a few seconds); `register` carries that back with
# `proof` = HMAC-SHA256(token, nonce || actorId (4 bytes, big-endian) ||
# "tandem control-plane registration v1"). A wrong proof, a nonce answered
# before, expired or never issued, or an id outside the job fails with
# PERMISSION_DENIED or INVALID_ARGUMENT, and the controller logs and counts
# it; other connections are not disturbed. `node` is the host the actor
# runs on as its launcher knows it (Slurm's node name; at most 255 bytes),
# or empty where every actor shares the controller's host.
interface Controller {
  register @0 (actorId :Int32, nonce :Data, proof :Data, actor :Actor, node :Text)
      -> (session :ActorSession);
  challenge @1 (actorId :Int32, nonce :Data) -> (nonce :Data, proof :Data);
}
