#include "train/dist.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef SLUICE_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef SLUICE_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#if defined(SLUICE_HAVE_GLOO) || defined(SLUICE_HAVE_NCCL)
#define SLUICE_HAVE_PROCESS_GROUP 1
#endif

#include <torch/torch.h>

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <functional>
#include <set>
#include <sstream>
#include <vector>

#include "common/clock.h"

namespace sluice {
namespace {

using Millis = std::chrono::milliseconds;

Millis ToMillis(double seconds) { return Millis(static_cast<int64_t>(seconds * 1000)); }

std::string Seconds(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

// "1", "1, 2" (ranks in ascending order).
std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

Result<int> ParseInt(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0 || v > 1'000'000) {
    return InvalidArgument(what + " is '" + text + "': not a number from 0 to 1000000");
  }
  return static_cast<int>(v);
}

std::string JoinedKey(int rank) { return "sluice/joined/" + std::to_string(rank); }

// The first line of a c10d exception's message (the rest is a C++ stack trace).
std::string FirstLine(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

// The master's address, checked before the store tries it. A name that does not resolve fails
// at once (c10d would retry it until the rendezvous timeout, with a warning a second). Returns
// whether the address is one of this machine's (a socket binds to it), as rank 0's must be.
Result<bool> MasterIsLocal(const DistPlace& place, const std::string& who) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(place.master_addr.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    return InvalidArgument(who + ": the master's address '" + place.master_addr +
                           "' (--master, else MASTER_ADDR) does not resolve: " + gai_strerror(rc));
  }
  bool local = false;
  for (const addrinfo* a = found; a != nullptr && !local; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    local = bind(fd, a->ai_addr, a->ai_addrlen) == 0;  // port 0: any free one
    close(fd);
  }
  freeaddrinfo(found);
  return local;
}

// Rank 0's port, checked before its store binds it: one in use fails at once (the store would
// log its attempts and fail as if it had timed out).
Status CheckPortFree(const DistPlace& place, const std::string& who) {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  const int fd4 = fd < 0 ? socket(AF_INET, SOCK_STREAM, 0) : -1;
  if (fd < 0 && fd4 < 0) return Status::Ok();  // the store says what it finds
  const int one = 1;
  int rc = 0;
  if (fd >= 0) {  // [::] with IPv4 mapped: every address, as the store listens
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(place.master_port));
    a.sin6_addr = in6addr_any;
    rc = bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  } else {
    setsockopt(fd4, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(place.master_port));
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    rc = bind(fd4, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  }
  const int err = errno;
  close(fd >= 0 ? fd : fd4);
  if (rc == 0 || err != EADDRINUSE) return Status::Ok();
  return Unavailable(who + ": port " + std::to_string(place.master_port) +
                     " is in use on this machine (another run's rendezvous, or another program): give the ranks "
                     "another with --master ADDR:PORT, else MASTER_PORT");
}

// dist.interface, when set, must be one of this machine's network interfaces (Gloo would fail
// with an assertion's text).
Status CheckInterface(const std::string& interface, const std::string& who) {
  if (interface.empty()) return Status::Ok();
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return Status::Ok();  // Gloo says what it finds
  std::set<std::string> names;
  for (const ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6)) {
      names.insert(i->ifa_name);
    }
  }
  freeifaddrs(all);
  if (names.count(interface) != 0) return Status::Ok();
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return InvalidArgument(who + ": dist.interface " + interface +
                         ": this machine has no network interface of that name with an address (it has " + list + ")");
}

}  // namespace

Result<DistPlace> ResolveDistPlace(int world_size, int rank, const std::string& master, const EnvReader& env) {
  DistPlace p;
  std::string ws_from = "--world-size", rank_from = "--rank", master_from = "--master";
  if (world_size <= 0) {
    ws_from = "WORLD_SIZE";
    const char* v = env("WORLD_SIZE");
    if (v == nullptr) return p;  // one process
    SLUICE_ASSIGN_OR_RETURN(world_size, ParseInt(v, "WORLD_SIZE"));
  }
  if (rank < 0) {
    rank_from = "RANK";
    const char* v = env("RANK");
    if (v == nullptr) {
      if (world_size == 1) return p;
      return InvalidArgument("world size " + std::to_string(world_size) + " (" + ws_from +
                             ") but no rank: pass --rank R or set RANK");
    }
    SLUICE_ASSIGN_OR_RETURN(rank, ParseInt(v, "RANK"));
  }
  if (world_size < 1) return InvalidArgument(ws_from + " is 0: the world size is at least 1");
  if (rank >= world_size) {
    return InvalidArgument("rank " + std::to_string(rank) + " (" + rank_from + ") is outside a world of " +
                           std::to_string(world_size) + " (" + ws_from + "): ranks are 0 to " +
                           std::to_string(world_size - 1));
  }
  p.world_size = world_size;
  p.rank = rank;
  std::string addr = master, port;
  if (addr.empty()) {
    master_from = "MASTER_ADDR/MASTER_PORT";
    const char* a = env("MASTER_ADDR");
    const char* pt = env("MASTER_PORT");
    addr = a != nullptr ? a : p.master_addr;
    port = pt != nullptr ? pt : std::to_string(p.master_port);
  } else if (const size_t colon = addr.rfind(':'); colon != std::string::npos) {
    port = addr.substr(colon + 1);
    addr = addr.substr(0, colon);
  } else {
    port = std::to_string(p.master_port);
  }
  if (addr.empty()) return InvalidArgument(master_from + ": the master's address is empty");
  SLUICE_ASSIGN_OR_RETURN(const int port_number, ParseInt(port, master_from + "'s port"));
  if (port_number < 1 || port_number > 65535) {
    return InvalidArgument(master_from + ": port " + port + " is outside 1-65535");
  }
  p.master_addr = addr;
  p.master_port = port_number;
  p.group = true;
  return p;
}

bool HaveGloo() {
#ifdef SLUICE_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

bool HaveNccl() {
#ifdef SLUICE_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

Result<DistBackend> ResolveDistBackend(DistBackend wanted, int world_size) {
  const std::string nccl_build = "build with -DSLUICE_CUDA=ON against a CUDA PyTorch: docs/gpu.md";
  switch (wanted) {
    case DistBackend::kGloo:
      if (HaveGloo()) return wanted;
      return FailedPrecondition("dist.backend gloo: this sluice was built without Gloo process groups (install "
                                "libgloo-dev and rebuild" + std::string(HaveNccl() ? ", or set dist.backend nccl)" : ")"));
    case DistBackend::kNccl:
      if (HaveNccl()) return wanted;
      return FailedPrecondition("dist.backend nccl: this sluice was built without NCCL process groups (" +
                                nccl_build + ")");
    case DistBackend::kAuto:
      if (HaveGloo()) return DistBackend::kGloo;
      if (HaveNccl()) return DistBackend::kNccl;
      return FailedPrecondition("world size " + std::to_string(world_size) + ": this sluice was built "
                                "without Gloo process groups (install libgloo-dev and rebuild) or NCCL ones (" +
                                nccl_build + ")");
  }
  return wanted;
}

Status SameBackends(std::span<const std::string> backends) {
  std::vector<int> differ;
  for (size_t r = 1; r < backends.size(); ++r) {
    if (backends[r] != backends[0]) differ.push_back(static_cast<int>(r));
  }
  if (differ.empty()) return Status::Ok();
  return FailedPrecondition(std::string(differ.size() == 1 ? "rank " : "ranks ") + RankList(differ) +
                            (differ.size() == 1 ? " differs" : " differ") + " from rank 0 in dist.backend: " +
                            backends[static_cast<size_t>(differ[0])] + " on rank " + std::to_string(differ[0]) +
                            ", " + backends[0] + " on rank 0");
}

struct DistGroup::Impl {
  DistPlace place;
  DistConfig config;
  DistBackend backend = DistBackend::kGloo;
  c10::intrusive_ptr<c10d::Store> store;
  int machines = 1;  // distinct host names among the ranks
  // Where the exchanged tensors live: the host for Gloo, the rank's GPU for NCCL (copied there
  // and back around each operation).
  torch::Device comm_device = torch::kCPU;
#ifdef SLUICE_HAVE_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#endif
#ifdef SLUICE_HAVE_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif

#ifdef SLUICE_HAVE_PROCESS_GROUP
  // Calls f with the run's process group (both backends' operations have one signature).
  template <class F>
  auto With(F&& f) {
#if defined(SLUICE_HAVE_GLOO) && defined(SLUICE_HAVE_NCCL)
    if (nccl) return f(*nccl);
    return f(*gloo);
#elif defined(SLUICE_HAVE_NCCL)
    return f(*nccl);
#else
    return f(*gloo);
#endif
  }
#endif
  // A host tensor as the process group takes it (the same tensor, or a copy on the GPU), and a
  // buffer of the same shape for the group to fill.
  at::Tensor Out(const at::Tensor& host) const { return comm_device.is_cpu() ? host : host.to(comm_device); }
  at::Tensor In(const at::Tensor& host) const {
    return comm_device.is_cpu() ? host : torch::empty_like(host, host.options().device(comm_device));
  }
  // After the operation: what the group wrote into `in` lands in `host` (nothing for Gloo).
  void Back(const at::Tensor& in, at::Tensor& host) const {
    if (!comm_device.is_cpu()) host.copy_(in);
  }
};

DistGroup::DistGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DistGroup::~DistGroup() = default;
int DistGroup::rank() const { return impl_->place.rank; }
int DistGroup::world_size() const { return impl_->place.world_size; }
int DistGroup::machines() const { return impl_->machines; }

Result<std::unique_ptr<DistGroup>> DistGroup::Join(const DistPlace& place, const DistConfig& config) {
  SLUICE_ASSIGN_OR_RETURN(const DistBackend backend, ResolveDistBackend(config.backend, place.world_size));
  // A write to a peer that died (Gloo's pairs, the store's client) must fail with EPIPE and be
  // named, not end this process silently by SIGPIPE's default action (Python, which torchrun's
  // ranks usually are, ignores it for the same reason).
  std::signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>();
  impl->place = place;
  impl->config = config;
  impl->backend = backend;
  const std::string who = "rank " + std::to_string(place.rank) + " of " + std::to_string(place.world_size);
  const auto start = SteadyClock::now();
  if (backend == DistBackend::kGloo) SLUICE_RETURN_IF_ERROR(CheckInterface(config.interface, who));
  SLUICE_ASSIGN_OR_RETURN(const bool local, MasterIsLocal(place, who));
  if (place.rank == 0 && !local) {  // its store's clients would knock at another machine
    return InvalidArgument(who + ": rank 0 serves the rendezvous, and " + place.master_addr +
                           " (--master, else MASTER_ADDR) is not an address of this machine: start rank 0 where " +
                           place.master_addr + " is, or give this machine's address");
  }
  if (place.rank == 0) SLUICE_RETURN_IF_ERROR(CheckPortFree(place, who));
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(place.master_port);
    o.isServer = place.rank == 0;
    o.numWorkers = static_cast<size_t>(place.world_size);
    o.waitWorkers = false;  // the joined keys below say who is missing
    o.timeout = ToMillis(config.rendezvous_timeout);
    impl->store = c10::make_intrusive<c10d::TCPStore>(place.master_addr, o);
  } catch (const std::exception& e) {
    return Unavailable(who + ": " + (place.rank == 0 ? "could not serve the rendezvous at "
                                                      : "could not reach the master at ") +
                       place.master() + " within " + Seconds(config.rendezvous_timeout) + " (" + FirstLine(e) + ")");
  }
  std::vector<std::string> keys;
  for (int r = 0; r < place.world_size; ++r) keys.push_back(JoinedKey(r));
  try {
    // A rank joins under its host's name and its backend: the ranks count the machines they
    // span, and agree on the backend before they build its process group.
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const std::string name = std::string(EnumName(backend)) + " " + host;
    impl->store->set(JoinedKey(place.rank), std::vector<uint8_t>(name.begin(), name.end()));
    const double left = std::max(0.1, config.rendezvous_timeout - SecondsSince(start));
    impl->store->wait(keys, ToMillis(left));
    std::set<std::string> hosts;
    std::vector<std::string> backends;
    for (const std::string& k : keys) {
      const std::vector<uint8_t> v = impl->store->get(k);
      const std::string joined(v.begin(), v.end());
      const size_t space = joined.find(' ');
      backends.push_back(joined.substr(0, space));
      hosts.insert(space == std::string::npos ? "" : joined.substr(space + 1));
    }
    impl->machines = static_cast<int>(hosts.size());
    SLUICE_RETURN_IF_ERROR(SameBackends(backends));
  } catch (const std::exception&) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < place.world_size; ++r) {
        if (!impl->store->check({JoinedKey(r)})) missing.push_back(r);
      }
    } catch (const std::exception&) {
      return Unavailable(who + ": lost the master at " + place.master() + " during the rendezvous");
    }
    return Unavailable(std::string(missing.size() == 1 ? "rank " : "ranks ") + RankList(missing) + " of " +
                       std::to_string(place.world_size) + " did not join within " +
                       Seconds(config.rendezvous_timeout) + " at " + place.master() + " (seen from " + who + ")");
  }
  if (backend == DistBackend::kNccl) {
    SLUICE_RETURN_IF_ERROR(JoinNccl(*impl, who));
  } else {
    SLUICE_RETURN_IF_ERROR(JoinGloo(*impl, who));
  }
  return std::unique_ptr<DistGroup>(new DistGroup(std::move(impl)));
}

Status DistGroup::JoinGloo([[maybe_unused]] Impl& impl, [[maybe_unused]] const std::string& who) {
#ifdef SLUICE_HAVE_GLOO
  const DistConfig& config = impl.config;
  try {
    auto options = c10d::ProcessGroupGloo::Options::create();
    options->timeout = ToMillis(config.op_timeout);
    options->devices.push_back(config.interface.empty()
                                   ? c10d::ProcessGroupGloo::createDefaultDevice()
                                   : c10d::ProcessGroupGloo::createDeviceForInterface(config.interface));
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("sluice/gloo", impl.store);
    impl.gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, impl.place.rank, impl.place.world_size, options);
  } catch (const std::exception& e) {
    return Unavailable(who + ": the Gloo process group" +
                       (config.interface.empty() ? std::string() : " on interface " + config.interface) +
                       " failed: " + FirstLine(e));
  }
#endif
  return Status::Ok();
}

// NCCL moves tensors between GPUs: each rank exchanges through its own GPU (cuda:LOCAL_RANK, or
// the rank modulo the GPUs it sees), and the host's tensors are copied there and back around
// each operation. Blocking waits (unless the user's environment says otherwise) make an
// operation that outlives dist.op_timeout throw here, as Gloo's do, instead of the watchdog
// ending the process.
Status DistGroup::JoinNccl([[maybe_unused]] Impl& impl, [[maybe_unused]] const std::string& who) {
#ifdef SLUICE_HAVE_NCCL
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus == 0) return FailedPrecondition(who + ": dist.backend nccl needs a GPU, and this rank sees none");
  const char* local = std::getenv("LOCAL_RANK");
  Result<int> index = local != nullptr ? ParseInt(local, "LOCAL_RANK") : Result<int>(impl.place.rank);
  if (!index.ok()) return index.status();
  impl.comm_device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(*index % gpus));
  setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
  setenv("NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);  // libtorch 1.13's name
  try {
    c10::cuda::set_device(impl.comm_device.index());
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = ToMillis(impl.config.op_timeout);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("sluice/nccl", impl.store);
    impl.nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, impl.place.rank, impl.place.world_size, options);
  } catch (const std::exception& e) {
    return Unavailable(who + ": the NCCL process group on " + impl.comm_device.str() + " failed: " + FirstLine(e));
  }
#endif
  return Status::Ok();
}

std::string DistGroup::Transport() const {
  if (impl_->backend == DistBackend::kNccl) return "NCCL on " + impl_->comm_device.str();
  return "Gloo" + (impl_->config.interface.empty() ? std::string() : " on " + impl_->config.interface);
}

Status DistGroup::Agree(const std::string& what, const std::string& value) {
  const DistPlace& p = impl_->place;
  auto key = [&](int r) { return "sluice/agree/" + what + "/" + std::to_string(r); };
  std::vector<std::string> values(static_cast<size_t>(p.world_size));
  try {
    impl_->store->set(key(p.rank), std::vector<uint8_t>(value.begin(), value.end()));
    std::vector<std::string> keys;
    for (int r = 0; r < p.world_size; ++r) keys.push_back(key(r));
    impl_->store->wait(keys, ToMillis(impl_->config.op_timeout));
    for (int r = 0; r < p.world_size; ++r) {
      const std::vector<uint8_t> v = impl_->store->get(key(r));
      values[static_cast<size_t>(r)].assign(v.begin(), v.end());
    }
  } catch (const std::exception& e) {
    return Unavailable("rank " + std::to_string(p.rank) + " of " + std::to_string(p.world_size) +
                       ": comparing the ranks' " + what + " failed within " + Seconds(impl_->config.op_timeout) +
                       " (" + FirstLine(e) + ")");
  }
  std::vector<int> differ;
  for (int r = 1; r < p.world_size; ++r) {
    if (values[static_cast<size_t>(r)] != values[0]) differ.push_back(r);
  }
  if (differ.empty()) return Status::Ok();
  const std::string first = std::to_string(differ[0]);
  return FailedPrecondition(std::string(differ.size() == 1 ? "rank " : "ranks ") + RankList(differ) +
                            " differ" + (differ.size() == 1 ? "s" : "") + " from rank 0 in their " + what + ": " +
                            FirstDifference(values[static_cast<size_t>(differ[0])], "rank " + first, values[0],
                                            "rank 0"));
}

Status DistGroup::Barrier() {
#ifdef SLUICE_HAVE_PROCESS_GROUP
  try {
    impl_->With([](auto& g) { return g.barrier(); })->wait();
  } catch (const std::exception& e) {
    return Unavailable("rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) +
                       ": a barrier failed (another rank died or stalled past dist.op_timeout): " + FirstLine(e));
  }
#endif
  return Status::Ok();
}

Status DistGroup::AllGather(std::span<const float> mine, std::span<float> all) {
  const auto n = static_cast<int64_t>(mine.size());
  if (all.size() != mine.size() * static_cast<size_t>(world_size())) {
    return FailedPrecondition("all-gather: " + std::to_string(all.size()) + " floats for " + std::to_string(world_size()) +
                    " ranks of " + std::to_string(n));
  }
#ifdef SLUICE_HAVE_PROCESS_GROUP
  try {
    const auto opts = torch::TensorOptions().dtype(torch::kFloat);
    std::vector<at::Tensor> in{impl_->Out(torch::from_blob(const_cast<float*>(mine.data()), {n}, opts))};
    std::vector<at::Tensor> host;
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < world_size(); ++r) {
      host.push_back(torch::from_blob(all.data() + r * n, {n}, opts));
      out[0].push_back(impl_->In(host.back()));
    }
    impl_->With([&](auto& g) { return g.allgather(out, in); })->wait();
    for (int r = 0; r < world_size(); ++r) impl_->Back(out[0][static_cast<size_t>(r)], host[static_cast<size_t>(r)]);
  } catch (const std::exception& e) {
    return Unavailable("rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) +
                       ": an all-gather failed (another rank stopped or stalled past dist.op_timeout " +
                       Seconds(impl_->config.op_timeout) + "): " + FirstLine(e));
  }
#else
  std::copy(mine.begin(), mine.end(), all.begin());
#endif
  return Status::Ok();
}

Status DistGroup::AllToAll(std::span<const float> send, std::span<const uint64_t> send_counts, std::span<float> recv,
                           std::span<const uint64_t> recv_counts) {
#ifdef SLUICE_HAVE_PROCESS_GROUP
  try {
    std::vector<int64_t> in(send_counts.begin(), send_counts.end()), out(recv_counts.begin(), recv_counts.end());
    // Gloo wants a non-empty buffer even when nothing travels.
    float none = 0;
    at::Tensor input = impl_->Out(torch::from_blob(send.empty() ? &none : const_cast<float*>(send.data()),
                                                   {static_cast<int64_t>(send.size())}, torch::kFloat));
    at::Tensor host = torch::from_blob(recv.empty() ? &none : recv.data(), {static_cast<int64_t>(recv.size())},
                                       torch::kFloat);
    at::Tensor output = impl_->In(host);
    impl_->With([&](auto& g) { return g.alltoall_base(output, input, out, in); })->wait();
    impl_->Back(output, host);
  } catch (const std::exception& e) {
    return Unavailable("rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) +
                       ": an all-to-all failed (another rank stopped or stalled past dist.op_timeout " +
                       Seconds(impl_->config.op_timeout) + "): " + FirstLine(e));
  }
#else
  (void)send_counts, (void)recv_counts;
  std::copy(send.begin(), send.end(), recv.begin());
#endif
  return Status::Ok();
}

struct DistGroup::Pending {
  at::Tensor input, output;     // owned by torch (on the host for Gloo, the GPU for NCCL)
  std::function<void()> wait;   // the work's wait (its type differs between libtorch versions)
  std::vector<float> local;     // one process: what it sent itself
};

Result<std::shared_ptr<DistGroup::Pending>> DistGroup::StartAllToAll(std::span<const float> send,
                                                                     std::span<const uint64_t> send_counts,
                                                                     std::span<const uint64_t> recv_counts) {
  auto op = std::make_shared<Pending>();
#ifdef SLUICE_HAVE_PROCESS_GROUP
  try {
    std::vector<int64_t> in(send_counts.begin(), send_counts.end()), out(recv_counts.begin(), recv_counts.end());
    int64_t total = 0;
    for (int64_t c : out) total += c;
    // Gloo wants a non-empty buffer even when nothing travels.
    at::Tensor input = torch::empty({std::max<int64_t>(1, static_cast<int64_t>(send.size()))}, torch::kFloat);
    std::copy(send.begin(), send.end(), input.data_ptr<float>());
    op->input = impl_->Out(input);
    op->output = impl_->In(torch::empty({std::max<int64_t>(1, total)}, torch::kFloat));
    if (send.empty()) op->input = op->input.slice(0, 0, 0);
    if (total == 0) op->output = op->output.slice(0, 0, 0);
    auto work = impl_->With([&](auto& g) { return g.alltoall_base(op->output, op->input, out, in); });
    op->wait = [work]() mutable { work->wait(); };
  } catch (const std::exception& e) {
    return Unavailable("rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) +
                       ": an all-to-all could not start: " + FirstLine(e));
  }
#else
  (void)send_counts, (void)recv_counts;
  op->local.assign(send.begin(), send.end());
#endif
  return op;
}

Result<std::vector<float>> DistGroup::FinishAllToAll(Pending& op) {
#ifdef SLUICE_HAVE_PROCESS_GROUP
  try {
    if (op.wait) op.wait();
    op.wait = nullptr;
    if (!op.output.device().is_cpu()) op.output = op.output.cpu();
  } catch (const std::exception& e) {
    return Unavailable("rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) +
                       ": an all-to-all failed (another rank stopped or stalled past dist.op_timeout " +
                       Seconds(impl_->config.op_timeout) + "): " + FirstLine(e));
  }
  const float* got = op.output.data_ptr<float>();
  return std::vector<float>(got, got + op.output.numel());
#else
  return std::move(op.local);
#endif
}

Status DistGroup::Send(std::span<const std::byte> bytes, int peer) {
  return PointToPoint(const_cast<std::byte*>(bytes.data()), bytes.size(), peer, /*send=*/true);
}

Status DistGroup::Recv(std::span<std::byte> bytes, int peer) {
  return PointToPoint(bytes.data(), bytes.size(), peer, /*send=*/false);
}

Status DistGroup::PointToPoint(std::byte* data, size_t size, int peer, bool send) {
#ifdef SLUICE_HAVE_PROCESS_GROUP
  try {
    at::Tensor host = torch::from_blob(data, {static_cast<int64_t>(size)}, torch::kUInt8);
    std::vector<at::Tensor> t{send ? impl_->Out(host) : impl_->In(host)};
    impl_->With([&](auto& g) { return send ? g.send(t, peer, 0) : g.recv(t, peer, 0); })->wait();
    if (!send) impl_->Back(t[0], host);
  } catch (const std::exception& e) {
    return Unavailable("rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) + ": " +
                       (send ? "sending to" : "receiving from") + " rank " + std::to_string(peer) +
                       " failed (it stopped or stalled past dist.op_timeout " + Seconds(impl_->config.op_timeout) +
                       "): " + FirstLine(e));
  }
  return Status::Ok();
#else
  (void)data, (void)size, (void)send;
  return FailedPrecondition("rank " + std::to_string(rank()) + ": no process group to reach rank " +
                            std::to_string(peer));
#endif
}

std::string DistGroup::Missing() {
  // Keyed on the rank alone: a rank may fail in a collective after this one (a send that
  // completed into the socket lets it go on), and a run ends at its first failure. Ranks notice
  // a failure at different times (each collective times out on its own clock), so each waits up
  // to kWindow for the others' word, and rank 0, whose process holds the store, stays until
  // every rank that gave its word has read the others' (or kWindow more).
  constexpr std::chrono::seconds kWindow{10};
  auto failed = [](int r) { return "sluice/failed/" + std::to_string(r); };
  auto read = [](int r) { return "sluice/read/" + std::to_string(r); };
  auto left = [](SteadyClock::time_point deadline) {
    return std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline - SteadyClock::now()));
  };
  std::vector<int> missing, answered;
  try {
    impl_->store->setTimeout(std::chrono::duration_cast<Millis>(kWindow));
    impl_->store->set(failed(rank()), std::vector<uint8_t>{1});
    const auto deadline = SteadyClock::now() + kWindow;
    for (int r = 0; r < world_size(); ++r) {
      if (r == rank()) continue;
      try {
        impl_->store->wait({failed(r)}, left(deadline));
        answered.push_back(r);
      } catch (const std::exception&) {
        missing.push_back(r);
      }
    }
    impl_->store->check({failed(rank())});  // throws when the store itself is gone (rank 0 died)
    if (rank() != 0) {
      impl_->store->set(read(rank()), std::vector<uint8_t>{1});
    } else {
      const auto linger = SteadyClock::now() + kWindow;
      for (int r : answered) {
        try {
          impl_->store->wait({read(r)}, left(linger));
        } catch (const std::exception&) {
          // it died after its word: nothing more to wait for
        }
      }
    }
  } catch (const std::exception&) {
    return rank() == 0 ? "" : "rank 0 (the store's host)";
  }
  if (missing.empty()) return "";
  return std::string(missing.size() == 1 ? "rank " : "ranks ") + RankList(missing);
}

Result<std::string> DistGroup::Share(const std::string& what, const std::string& value) {
  const std::string key = "sluice/share/" + what;
  try {
    if (rank() == 0) impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    impl_->store->wait({key}, ToMillis(impl_->config.op_timeout));
    const std::vector<uint8_t> v = impl_->store->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    return Unavailable("rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) +
                       ": waiting for rank 0's " + what + " failed within " + Seconds(impl_->config.op_timeout) +
                       " (" + FirstLine(e) + ")");
  }
}

std::string FirstDifference(const std::string& a, const std::string& a_name, const std::string& b,
                            const std::string& b_name) {
  std::istringstream as(a), bs(b);
  std::string la, lb;
  while (true) {
    const bool ha = static_cast<bool>(std::getline(as, la));
    const bool hb = static_cast<bool>(std::getline(bs, lb));
    if (!ha && !hb) return "they differ";
    if (ha && hb && la == lb) continue;
    const size_t ca = ha ? la.find(": ") : std::string::npos, cb = hb ? lb.find(": ") : std::string::npos;
    if (ca != std::string::npos && cb != std::string::npos && la.substr(0, ca) == lb.substr(0, cb)) {
      return la.substr(0, ca) + " is " + la.substr(ca + 2) + " on " + a_name + ", " + lb.substr(cb + 2) +
             " on " + b_name;
    }
    return "'" + (ha ? la : std::string("(end)")) + "' on " + a_name + ", '" + (hb ? lb : std::string("(end)")) +
           "' on " + b_name;
  }
}

}  // namespace sluice
