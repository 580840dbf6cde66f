// SPDX-License-Identifier: BSD-3-Clause
#include "faults/spec.h"

#include <cerrno>
#include <cstdarg>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "cm/mad.h"

namespace rnicdv::sim::faults {
namespace {

constexpr uint32_t kMaxQpn = 0xFFFFFF;
constexpr uint64_t kMaxTimeNs = 86'400ull * 1'000'000'000ull;  // a day
constexpr size_t kMaxSpecBytes = 64 * 1024;

// Blanks as the word splitter sees them (isspace in the C locale).
bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

struct Field {
  std::string key;
  std::string value;
  bool used = false;
};

// One clause being parsed: its number and text for messages, and its key=value fields.
class Clause {
 public:
  Clause(size_t number, std::string_view text) : number_(number), text_(text) {}

  std::string kind;
  std::vector<Field> fields;

  Status error(const std::string& field, const char* fmt, ...) const
      __attribute__((format(printf, 3, 4))) {
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    if (field.empty())
      return Status::error(Errc::invalid_argument, "fault spec: clause %zu '%s': %s", number_,
                           text_.c_str(), reason);
    return Status::error(Errc::invalid_argument, "fault spec: clause %zu '%s': %s: %s", number_,
                         text_.c_str(), field.c_str(), reason);
  }

  bool has(const char* key) const {
    for (const Field& f : fields)
      if (f.key == key) return true;
    return false;
  }

  Field* find(const char* key) {
    for (Field& f : fields)
      if (f.key == key) {
        f.used = true;
        return &f;
      }
    return nullptr;
  }

  // Every field must be one the clause's kind takes.
  Status check_all_used(std::initializer_list<const char*> allowed) const {
    for (const Field& f : fields) {
      if (f.used) continue;
      std::string list;
      for (const char* a : allowed) {
        if (!list.empty()) list += ", ";
        list += a;
      }
      return error(f.key, "not a field of '%s' (it takes %s)", kind.c_str(), list.c_str());
    }
    return Status::ok();
  }

 private:
  size_t number_;
  std::string text_;
};

Result<uint64_t> parse_uint(const Clause& c, const Field& f, uint64_t lo, uint64_t hi) {
  const char* s = f.value.c_str();
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 0);
  if (f.value.empty() || *end != '\0' || errno == ERANGE || f.value[0] == '-')
    return c.error(f.key, "'%s' is not a whole number in [%llu, %llu]", s,
                   static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi));
  if (v < lo || v > hi)
    return c.error(f.key, "%llu is not in [%llu, %llu]", v, static_cast<unsigned long long>(lo),
                   static_cast<unsigned long long>(hi));
  return static_cast<uint64_t>(v);
}

Result<double> parse_probability(const Clause& c, const Field& f) {
  const char* s = f.value.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (f.value.empty() || *end != '\0' || !std::isfinite(v) || v < 0.0 || v > 1.0)
    return c.error(f.key, "'%s' is not a probability in [0, 1]", s);
  return v;
}

// "250us", "5ms", "1.5s", "800ns": a unit is required.
Result<uint64_t> parse_time(const Clause& c, const Field& f) {
  const char* s = f.value.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  const std::string unit = end ? end : "";
  double scale = 0;
  if (unit == "ns") scale = 1;
  else if (unit == "us") scale = 1e3;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "s") scale = 1e9;
  if (end == s || scale == 0 || !std::isfinite(v) || v < 0)
    return c.error(f.key, "'%s' is not a time (a number and ns, us, ms or s, up to 86400s)", s);
  const double ns = v * scale;
  if (ns > static_cast<double>(kMaxTimeNs))
    return c.error(f.key, "'%s' is not a time (a number and ns, us, ms or s, up to 86400s)", s);
  return static_cast<uint64_t>(std::llround(ns));
}

// A device's address, of either family. The unspecified address names no device: leaving the
// field out is how a rule says "any".
Result<hw::IpAddress> parse_ip(const Clause& c, const Field& f) {
  Result<hw::IpAddress> a = hw::IpAddress::parse(f.value);
  if (!a.is_ok())
    return c.error(f.key, "'%s' is not an IPv4 or IPv6 address", f.value.c_str());
  if (a->is_unspecified())
    return c.error(f.key, "'%s' names no device (leave %s= out to match any)", f.value.c_str(),
                   f.key.c_str());
  return *a;
}

struct Name {
  const char* name;
  uint32_t value;
};

constexpr Name kOpcodeNames[] = {
    {"send", op::send},           {"write", op::write},
    {"read", op::read},           {"atomic", op::atomic},
    {"ack", op::ack},             {"read_response", op::read_response},
    {"atomic_ack", op::atomic_ack}, {"ud", op::ud},
    {"mad", op::mad},             {"requests", op::requests},
    {"responses", op::responses}, {"all", op::all},
};

constexpr uint32_t attr(cm::AttrId id) {
  return static_cast<uint32_t>(id);
}

constexpr Name kMadNames[] = {
    {"req", attr(cm::AttrId::req)},   {"mra", attr(cm::AttrId::mra)},
    {"rej", attr(cm::AttrId::rej)},   {"rep", attr(cm::AttrId::rep)},
    {"rtu", attr(cm::AttrId::rtu)},   {"dreq", attr(cm::AttrId::dreq)},
    {"drep", attr(cm::AttrId::drep)}, {"sidr_req", attr(cm::AttrId::sidr_req)},
    {"sidr_rep", attr(cm::AttrId::sidr_rep)}, {"lap", attr(cm::AttrId::lap)},
    {"apr", attr(cm::AttrId::apr)},
};

// The name of `value` in `table`, its first entry that has exactly that value.
template <size_t N>
const char* name_in(const Name (&table)[N], uint32_t value) {
  for (const Name& n : table)
    if (n.value == value) return n.name;
  return "other";
}

struct StatusName {
  const char* name;
  const char* alias;
  ChosenStatus status;
};

constexpr StatusName kStatusNames[] = {
    {"remote_access", "rem_access", ChosenStatus::remote_access},
    {"remote_operation", "rem_op", ChosenStatus::remote_operation},
    {"rnr_retry", "rnr_retry_exceeded", ChosenStatus::rnr_retry},
    {"retry", "retry_exceeded", ChosenStatus::retry},
    {"local_protection", "loc_prot", ChosenStatus::local_protection},
    {"local_length", "loc_len", ChosenStatus::local_length},
};

template <size_t N>
std::string names_of(const Name (&table)[N]) {
  std::string out;
  for (const Name& n : table) {
    if (!out.empty()) out += ", ";
    out += n.name;
  }
  return out;
}

// A comma-separated list of names from `table`, OR-ed (opcodes) or collected (MADs).
template <size_t N>
Result<std::vector<uint32_t>> parse_names(const Clause& c, const Field& f, const Name (&table)[N]) {
  std::vector<uint32_t> out;
  std::stringstream ss(f.value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    bool found = false;
    for (const Name& n : table)
      if (item == n.name) {
        out.push_back(n.value);
        found = true;
      }
    if (!found)
      return c.error(f.key, "'%s' is not one of %s", item.c_str(), names_of(table).c_str());
  }
  if (out.empty()) return c.error(f.key, "empty (one or more of %s)", names_of(table).c_str());
  return out;
}

Result<uint32_t> parse_opcodes(const Clause& c, const Field& f, uint32_t allowed) {
  RNICDV_ASSIGN_OR_RETURN(std::vector<uint32_t> bits, parse_names(c, f, kOpcodeNames));
  uint32_t mask = 0;
  for (uint32_t b : bits) mask |= b;
  if ((mask & ~allowed) != 0)
    return c.error(f.key, "'%s' names opcodes this kind does not count (send, write, read, atomic)",
                   f.value.c_str());
  return mask;
}

// p=, nth=, every=, after=, count=. `default_nth`: the trigger when none of p, nth and every is
// given (0: one is required).
Status parse_trigger(Clause& c, Trigger* t, uint64_t default_nth) {
  Field* p = c.find("p");
  Field* nth = c.find("nth");
  Field* every = c.find("every");
  const int given = (p != nullptr) + (nth != nullptr) + (every != nullptr);
  if (given > 1) return c.error("", "give one of p=, nth= and every=, not several");
  if (p) {
    RNICDV_ASSIGN_OR_RETURN(t->probability, parse_probability(c, *p));
  } else if (nth) {
    RNICDV_ASSIGN_OR_RETURN(t->nth, parse_uint(c, *nth, 1, UINT64_MAX - 1));
  } else if (every) {
    RNICDV_ASSIGN_OR_RETURN(t->every, parse_uint(c, *every, 1, UINT64_MAX - 1));
  } else if (default_nth != 0) {
    t->nth = default_nth;
  } else if (c.has("count")) {
    t->every = 1;  // count=N alone: the first N matches
  } else {
    return c.error("", "say when: p=P (a probability), nth=N, every=N, or count=N (the first N)");
  }
  if (Field* f = c.find("after")) {
    RNICDV_ASSIGN_OR_RETURN(t->after, parse_uint(c, *f, 0, UINT64_MAX - 1));
  }
  if (Field* f = c.find("count")) {
    RNICDV_ASSIGN_OR_RETURN(t->count, parse_uint(c, *f, 1, UINT64_MAX - 1));
  }
  return Status::ok();
}

Status parse_device(Clause& c, uint32_t* device) {
  if (Field* f = c.find("device")) {
    RNICDV_ASSIGN_OR_RETURN(uint64_t v, parse_uint(c, *f, 0, kMaxDevice));
    *device = static_cast<uint32_t>(v);
  }
  return Status::ok();
}

// addr=IP: the device with that address, which under the uverbs shim (one process, one
// fabric, device 0) is how a rule picks one process of several.
Status parse_addr(Clause& c, hw::IpAddress* addr) {
  if (Field* f = c.find("addr")) {
    RNICDV_ASSIGN_OR_RETURN(*addr, parse_ip(c, *f));
  }
  return Status::ok();
}

Status parse_qpn(Clause& c, uint32_t* qpn) {
  if (Field* f = c.find("qp")) {
    RNICDV_ASSIGN_OR_RETURN(uint64_t v, parse_uint(c, *f, 1, kMaxQpn));
    *qpn = static_cast<uint32_t>(v);
  }
  return Status::ok();
}

Result<FrameRule> parse_frame(Clause& c, FrameAction action) {
  FrameRule r;
  r.action = action;
  RNICDV_TRY(parse_trigger(c, &r.when, 0));
  if (Field* f = c.find("opcode")) {
    RNICDV_ASSIGN_OR_RETURN(r.match.opcodes, parse_opcodes(c, *f, op::all));
  }
  if (Field* f = c.find("dir")) {
    if (f->value == "request") r.match.opcodes &= op::requests;
    else if (f->value == "response") r.match.opcodes &= op::responses;
    else if (f->value != "any")
      return c.error(f->key, "'%s' is not one of request, response, any", f->value.c_str());
    if (r.match.opcodes == 0)
      return c.error(f->key, "'%s' leaves none of the opcodes given", f->value.c_str());
  }
  if (Field* f = c.find("mad")) {
    RNICDV_ASSIGN_OR_RETURN(std::vector<uint32_t> attrs, parse_names(c, *f, kMadNames));
    for (uint32_t a : attrs) r.match.mads.push_back(static_cast<uint16_t>(a));
    if ((r.match.opcodes & op::mad) == 0)
      return c.error(f->key, "CM MADs are not among the opcodes or direction given");
    r.match.opcodes = op::mad;
  }
  RNICDV_TRY(parse_qpn(c, &r.match.qpn));
  if (Field* f = c.find("from")) {
    RNICDV_ASSIGN_OR_RETURN(r.match.from, parse_ip(c, *f));
  }
  if (Field* f = c.find("to")) {
    RNICDV_ASSIGN_OR_RETURN(r.match.to, parse_ip(c, *f));
  }
  RNICDV_TRY(parse_device(c, &r.match.device));
  if (action == FrameAction::delay) {
    if (Field* f = c.find("max")) {
      RNICDV_ASSIGN_OR_RETURN(r.max_delay_ns, parse_time(c, *f));
      if (r.max_delay_ns == 0) return c.error(f->key, "must be more than 0ns");
    }
  }
  if (action == FrameAction::reorder) {
    if (Field* f = c.find("hold")) {
      RNICDV_ASSIGN_OR_RETURN(r.hold_ns, parse_time(c, *f));
      if (r.hold_ns < 2) return c.error(f->key, "must be at least 2ns");
    }
  }
  if (action == FrameAction::delay)
    RNICDV_TRY(c.check_all_used({"p", "nth", "every", "after", "count", "opcode", "dir", "mad", "qp",
                                 "from", "to", "device", "max"}));
  else if (action == FrameAction::reorder)
    RNICDV_TRY(c.check_all_used({"p", "nth", "every", "after", "count", "opcode", "dir", "mad", "qp",
                                 "from", "to", "device", "hold"}));
  else
    RNICDV_TRY(c.check_all_used({"p", "nth", "every", "after", "count", "opcode", "dir", "mad", "qp",
                                 "from", "to", "device"}));
  return r;
}

Result<LinkRule> parse_link(Clause& c, LinkAction action) {
  LinkRule r;
  r.action = action;
  Field* at = c.find("at");
  Field* after = c.find("after");
  if ((at != nullptr) == (after != nullptr))
    return c.error("", "say when: at=TIME (from the start) or after=N (frames the device sent)");
  if (at) {
    RNICDV_ASSIGN_OR_RETURN(r.at_ns, parse_time(c, *at));
  } else {
    RNICDV_ASSIGN_OR_RETURN(r.after_frames, parse_uint(c, *after, 1, UINT64_MAX - 1));
  }
  RNICDV_TRY(parse_device(c, &r.device));
  RNICDV_TRY(parse_addr(c, &r.addr));
  if (action == LinkAction::port_down) {
    if (Field* f = c.find("for")) {
      RNICDV_ASSIGN_OR_RETURN(r.for_ns, parse_time(c, *f));
      if (r.for_ns == 0) return c.error(f->key, "must be more than 0ns (leave it out to stay down)");
    }
    RNICDV_TRY(c.check_all_used({"at", "after", "for", "device", "addr"}));
  } else {
    RNICDV_TRY(c.check_all_used({"at", "after", "device", "addr"}));
  }
  return r;
}

Result<WrRule> parse_wr(Clause& c) {
  WrRule r;
  Field* status = c.find("status");
  if (!status) return c.error("status", "missing (remote_access, remote_operation, rnr_retry, retry, local_protection, local_length)");
  bool found = false;
  for (const StatusName& n : kStatusNames)
    if (status->value == n.name || status->value == n.alias) {
      r.status = n.status;
      found = true;
    }
  if (!found)
    return c.error(status->key, "'%s' is not one of remote_access, remote_operation, rnr_retry, retry, local_protection, local_length",
                   status->value.c_str());
  RNICDV_TRY(parse_trigger(c, &r.when, 1));
  if (!c.find("count") && r.when.probability == 0 && r.when.every == 0) r.when.count = 1;
  if (Field* f = c.find("opcode")) {
    RNICDV_ASSIGN_OR_RETURN(r.opcodes,
                            parse_opcodes(c, *f, op::send | op::write | op::read | op::atomic));
  }
  RNICDV_TRY(parse_qpn(c, &r.qpn));
  RNICDV_TRY(parse_device(c, &r.device));
  RNICDV_TRY(parse_addr(c, &r.addr));
  RNICDV_TRY(c.check_all_used(
      {"status", "p", "nth", "every", "after", "count", "opcode", "qp", "device", "addr"}));
  return r;
}

Result<CmRule> parse_cm(Clause& c, CmAction action) {
  CmRule r;
  r.action = action;
  RNICDV_TRY(parse_trigger(c, &r.when, 1));
  RNICDV_TRY(parse_device(c, &r.device));
  RNICDV_TRY(parse_addr(c, &r.addr));
  if (action == CmAction::reject) {
    if (Field* f = c.find("reason")) {
      RNICDV_ASSIGN_OR_RETURN(uint64_t v, parse_uint(c, *f, 1, 33));
      r.reason = static_cast<uint16_t>(v);
    }
    RNICDV_TRY(c.check_all_used({"reason", "p", "nth", "every", "after", "count", "device", "addr"}));
  } else {
    Field* at = c.find("at");
    if (!at) return c.error("at", "missing (a time from the start, e.g. at=20ms)");
    RNICDV_ASSIGN_OR_RETURN(r.at_ns, parse_time(c, *at));
    RNICDV_TRY(c.check_all_used({"at", "p", "nth", "every", "after", "count", "device", "addr"}));
  }
  return r;
}

struct KindEntry {
  const char* name;
  Status (*parse)(Clause&, FaultSpec*);
};

template <FrameAction A>
Status add_frame(Clause& c, FaultSpec* s) {
  RNICDV_ASSIGN_OR_RETURN(FrameRule r, parse_frame(c, A));
  s->frames.push_back(std::move(r));
  return Status::ok();
}

template <LinkAction A>
Status add_link(Clause& c, FaultSpec* s) {
  RNICDV_ASSIGN_OR_RETURN(LinkRule r, parse_link(c, A));
  s->links.push_back(r);
  return Status::ok();
}

template <CmAction A>
Status add_cm(Clause& c, FaultSpec* s) {
  RNICDV_ASSIGN_OR_RETURN(CmRule r, parse_cm(c, A));
  s->cms.push_back(r);
  return Status::ok();
}

Status add_wr(Clause& c, FaultSpec* s) {
  RNICDV_ASSIGN_OR_RETURN(WrRule r, parse_wr(c));
  s->wrs.push_back(r);
  return Status::ok();
}

constexpr KindEntry kKinds[] = {
    {"drop", add_frame<FrameAction::drop>},
    {"duplicate", add_frame<FrameAction::duplicate>},
    {"reorder", add_frame<FrameAction::reorder>},
    {"corrupt", add_frame<FrameAction::corrupt>},
    {"delay", add_frame<FrameAction::delay>},
    {"port-down", add_link<LinkAction::port_down>},
    {"port-up", add_link<LinkAction::port_up>},
    {"fatal", add_link<LinkAction::fatal>},
    {"wr", add_wr},
    {"cm-reject", add_cm<CmAction::reject>},
    {"cm-dreq", add_cm<CmAction::dreq>},
};

// seed=N and log=PATH, clauses of a single field.
Status parse_setting(Clause& c, FaultSpec* spec) {
  Field& f = c.fields.front();
  if (c.fields.size() != 1)
    return c.error(f.key, "a setting stands alone in its clause (seed=N; log=PATH)");
  if (f.key == "seed") {
    if (spec->seed_given) return c.error(f.key, "given twice");
    RNICDV_ASSIGN_OR_RETURN(spec->seed, parse_uint(c, f, 0, UINT64_MAX));
    spec->seed_given = true;
    return Status::ok();
  }
  if (f.key == "log") {
    if (f.value.empty()) return c.error(f.key, "needs a path");
    spec->log_path = f.value;
    return Status::ok();
  }
  return c.error(f.key, "not a setting (seed, log) nor a kind of fault");
}

}  // namespace

const char* opcode_name(uint32_t bit) noexcept {
  return name_in(kOpcodeNames, bit);
}

const char* mad_name(uint16_t attr_id) noexcept {
  return name_in(kMadNames, attr_id);
}

const char* frame_action_name(FrameAction a) noexcept {
  switch (a) {
    case FrameAction::drop: return "drop";
    case FrameAction::duplicate: return "duplicate";
    case FrameAction::reorder: return "reorder";
    case FrameAction::corrupt: return "corrupt";
    case FrameAction::delay: return "delay";
  }
  return "?";
}

const char* link_action_name(LinkAction a) noexcept {
  switch (a) {
    case LinkAction::port_down: return "port-down";
    case LinkAction::port_up: return "port-up";
    case LinkAction::fatal: return "fatal";
  }
  return "?";
}

const char* chosen_status_name(ChosenStatus s) noexcept {
  for (const StatusName& n : kStatusNames)
    if (n.status == s) return n.name;
  return "?";
}

bool chosen_status_is_remote(ChosenStatus s) noexcept {
  return s != ChosenStatus::local_protection && s != ChosenStatus::local_length;
}

const char* cm_action_name(CmAction a) noexcept {
  return a == CmAction::reject ? "cm-reject" : "cm-dreq";
}

Result<FaultSpec> parse_fault_spec(std::string_view text) {
  FaultSpec spec;
  spec.text = std::string(trim(text));
  if (text.size() > kMaxSpecBytes)
    return Status::error(Errc::invalid_argument, "fault spec: %zu bytes (at most %zu)",
                         text.size(), kMaxSpecBytes);
  // Comments out, then clauses split on ';' and new lines.
  std::string clean;
  bool comment = false;
  for (char ch : text) {
    if (ch == '\n') comment = false;
    if (ch == '#') comment = true;
    if (!comment) clean += ch == '\n' ? ';' : ch;
  }
  size_t number = 0;
  size_t start = 0;
  while (start <= clean.size()) {
    size_t end = clean.find(';', start);
    if (end == std::string::npos) end = clean.size();
    const std::string_view body = trim(std::string_view(clean).substr(start, end - start));
    start = end + 1;
    if (body.empty()) continue;
    Clause c(++number, body);
    // Words separated by blanks; the first is the kind unless it is a key=value setting.
    std::stringstream words{std::string(body)};
    std::string word;
    bool first = true;
    while (words >> word) {
      const size_t eq = word.find('=');
      if (first && eq == std::string::npos) {
        c.kind = word;
        first = false;
        continue;
      }
      first = false;
      if (eq == std::string::npos || eq == 0)
        return c.error(word, "expected key=value");
      Field f{word.substr(0, eq), word.substr(eq + 1)};
      for (const Field& g : c.fields)
        if (g.key == f.key) return c.error(f.key, "given twice");
      c.fields.push_back(std::move(f));
    }
    if (c.kind.empty() && c.fields.empty()) continue;  // blanks the splitter alone saw
    if (c.kind.empty()) {
      RNICDV_TRY(parse_setting(c, &spec));
      continue;
    }
    const KindEntry* kind = nullptr;
    for (const KindEntry& k : kKinds)
      if (c.kind == k.name) kind = &k;
    if (!kind) {
      std::string list;
      for (const KindEntry& k : kKinds) {
        if (!list.empty()) list += ", ";
        list += k.name;
      }
      return c.error("", "'%s' is not a kind of fault (%s; or seed=N, log=PATH)", c.kind.c_str(),
                     list.c_str());
    }
    RNICDV_TRY(kind->parse(c, &spec));
  }
  return spec;
}

Result<FaultSpec> fault_spec_from(std::string_view given, std::string* source) {
  std::string text(given);
  *source = "configuration";
  if (text.empty()) {
    const char* env = std::getenv("RNICDV_SIM_FAULTS");
    if (env == nullptr || *env == '\0') return FaultSpec{};
    text = env;
    *source = "RNICDV_SIM_FAULTS";
  }
  if (!text.empty() && text[0] == '@') {
    const std::string path = text.substr(1);
    std::ifstream in(path);
    if (!in)
      return Status::error(Errc::invalid_argument, "%s: cannot read the fault spec file '%s': %s",
                           source->c_str(), path.c_str(), std::strerror(errno));
    std::stringstream all;
    all << in.rdbuf();
    text = all.str();
    *source = path;
  }
  Result<FaultSpec> spec = parse_fault_spec(text);
  if (!spec) return spec.status().prepend(*source);
  return spec;
}

}  // namespace rnicdv::sim::faults
