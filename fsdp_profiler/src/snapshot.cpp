// Snapshot reader and replay (see snapshot.hpp). Addresses and streams are 64-bit unsigned;
// JSON numbers that do not fit, negative sizes, non-integers and missing fields are errors that
// name device_traces[d][i] and the field.
#include "mlprio/fsdp/snapshot.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "mlprio/io/json_input.hpp"

namespace mlprio::fsdp {

namespace {

using nlohmann::json;

std::string where(const std::string& src, size_t d, size_t i) {
  return src + ": device_traces[" + std::to_string(d) + "][" + std::to_string(i) + "]";
}

uint64_t get_u64(const json& e, const char* field, const std::string& loc, bool required) {
  const auto it = e.find(field);
  if (it == e.end()) {
    if (!required) return 0;
    throw SnapshotError(loc + ": missing field '" + field +
                        "' (expected a non-negative integer, e.g. \"" + field + "\": 1024)");
  }
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer()) {
    const auto v = it->get<int64_t>();
    if (v >= 0) return static_cast<uint64_t>(v);
  }
  throw SnapshotError(loc + "." + field + ": expected a non-negative integer, got " +
                      io::describe_json_value(*it));
}

TraceAction parse_action(const std::string& a) {
  if (a == "alloc") return TraceAction::ALLOC;
  if (a == "free_requested") return TraceAction::FREE_REQUESTED;
  if (a == "free_completed") return TraceAction::FREE_COMPLETED;
  if (a == "free") return TraceAction::FREE;
  return TraceAction::OTHER;
}

}  // namespace

Snapshot parse_snapshot(std::string_view text, const std::string& src) {
  json doc;
  try {
    doc = io::parse_untrusted_json(text);
  } catch (const io::JsonInputError& e) {
    throw SnapshotError(src + ": " + e.what() +
                        " -- convert a pickle with fsdp_profiler/scripts/"
                        "snapshot_to_json.py");
  }
  if (!doc.is_object())
    throw SnapshotError(src + ": top level must be an object with \"device_traces\"");
  const auto traces = doc.find("device_traces");
  if (traces == doc.end())
    throw SnapshotError(src +
                        ": no \"device_traces\" (record with torch.cuda.memory."
                        "_record_memory_history() before _dump_snapshot())");
  if (!traces->is_array())
    throw SnapshotError(src + ": \"device_traces\" must be a list (one list per device)");
  Snapshot snap;
  for (size_t d = 0; d < traces->size(); ++d) {
    const json& dev = (*traces)[d];
    if (!dev.is_array())
      throw SnapshotError(src + ": device_traces[" + std::to_string(d) + "] must be a list");
    std::vector<TraceEntry> out;
    out.reserve(dev.size());
    for (size_t i = 0; i < dev.size(); ++i) {
      const json& e = dev[i];
      const std::string loc = where(src, d, i);
      if (!e.is_object()) throw SnapshotError(loc + ": expected an object {\"action\": ...}");
      const auto act = e.find("action");
      if (act == e.end() || !act->is_string())
        throw SnapshotError(loc +
                            ": missing or non-string \"action\" (alloc, free_requested, "
                            "free_completed, segment_alloc, ...)");
      TraceEntry t;
      t.action = parse_action(act->get<std::string>());
      const bool mem = t.action != TraceAction::OTHER;
      t.addr = get_u64(e, "addr", loc, mem);
      t.size = get_u64(e, "size", loc, mem);
      t.stream = get_u64(e, "stream", loc, false);
      const auto tu = e.find("time_us");
      if (tu != e.end()) {
        if (!tu->is_number())
          throw SnapshotError(loc + ".time_us: expected a number, got " +
                              io::describe_json_value(*tu));
        t.time_us = tu->get<double>();
      }
      out.push_back(t);
    }
    snap.device_traces.push_back(std::move(out));
  }
  const auto settings = doc.find("allocator_settings");
  // Kept for reference only: the object's scalar members (nothing nested is re-serialised).
  if (settings != doc.end() && settings->is_object()) {
    json flat = json::object();
    for (auto it = settings->begin(); it != settings->end(); ++it)
      if (it->is_primitive()) flat[it.key()] = *it;
    snap.allocator_settings = flat.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return snap;
}

Snapshot read_snapshot(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SnapshotError(path + ": cannot open snapshot file: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_snapshot(ss.str(), path);
}

ReplayResult replay_snapshot(const Snapshot& snap, Device& device,
                             const AllocatorSettings& settings, const ReplayOptions& opts) {
  ReplayResult res;
  int dev = opts.device_index;
  if (dev < 0) {
    dev = 0;
    for (size_t d = 0; d < snap.device_traces.size(); ++d)
      if (!snap.device_traces[d].empty()) {
        dev = static_cast<int>(d);
        break;
      }
  }
  if (static_cast<size_t>(dev) >= snap.device_traces.size()) {
    if (opts.device_index >= 0)
      throw SnapshotError("snapshot has no device " + std::to_string(dev) + " (it has " +
                          std::to_string(snap.device_traces.size()) + ")");
    res.device_index = dev;
    return res;
  }
  res.device_index = dev;
  const auto& trace = snap.device_traces[static_cast<size_t>(dev)];
  CachingAllocator alloc(device, settings);
  std::unordered_map<uint64_t, StreamId> streams;
  std::unordered_map<uint64_t, BlockId> live;     // trace address -> model block
  std::unordered_map<uint64_t, BlockId> pending;  // free requested, not yet completed
  std::unordered_map<uint64_t, int> failed;       // trace addresses whose alloc failed here
  auto stream_id = [&](uint64_t raw, size_t i) {
    auto it = streams.find(raw);
    if (it != streams.end()) return it->second;
    if (streams.size() >= MAX_STREAMS)
      throw SnapshotError(where("snapshot", static_cast<size_t>(dev), i) + ": more than " +
                          std::to_string(MAX_STREAMS) + " streams");
    const auto id = static_cast<StreamId>(streams.size());
    streams.emplace(raw, id);
    return id;
  };
  res.series.reserve(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    ++res.entries;
    switch (e.action) {
      case TraceAction::ALLOC: {
        ++res.allocs;
        if (live.count(e.addr) || pending.count(e.addr))
          throw SnapshotError(where("snapshot", static_cast<size_t>(dev), i) +
                              ": alloc at an address that is still in use in the trace");
        const int64_t syncs_before = alloc.stats().num_sync_all_streams;
        const auto r = alloc.malloc(e.size, stream_id(e.stream, i));
        // A synchronisation completed every deferred free; their ids may be reused from now on.
        if (alloc.stats().num_sync_all_streams != syncs_before) pending.clear();
        if (r.ok) {
          live.emplace(e.addr, r.id);
          failed.erase(e.addr);
        } else {
          ++res.failed_allocs;
          failed[e.addr] = 1;
        }
        break;
      }
      case TraceAction::FREE_REQUESTED:
      case TraceAction::FREE: {
        ++res.frees;
        const auto it = live.find(e.addr);
        if (it == live.end()) {
          if (!failed.erase(e.addr)) ++res.unmatched_frees;
          break;
        }
        if (e.action == TraceAction::FREE) {
          alloc.free(it->second);
        } else {
          alloc.free_deferred(it->second);
          pending.emplace(e.addr, it->second);
        }
        live.erase(it);
        break;
      }
      case TraceAction::FREE_COMPLETED: {
        const auto it = pending.find(e.addr);
        if (it != pending.end()) {
          alloc.complete_deferred_free(it->second);  // false if a sync already returned it
          pending.erase(it);
        }
        break;
      }
      case TraceAction::OTHER:
        ++res.other_actions;
        continue;
    }
    const auto& s = alloc.stats();
    res.series.push_back(ReplaySample{static_cast<int64_t>(i), s.allocated_bytes[AGGREGATE].current,
                                      s.reserved_bytes[AGGREGATE].current,
                                      s.active_bytes[AGGREGATE].current});
    if (opts.check_invariants) alloc.check();
  }
  alloc.check();
  res.stats = alloc.stats();
  res.device_time_us = alloc.device_time_us();
  return res;
}

}  // namespace mlprio::fsdp
