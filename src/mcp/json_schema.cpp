#include "mcp/json_schema.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <utility>

namespace basal::mcp {
namespace {

// --- Text ----------------------------------------------------------------------------------------

// The longest prefix of `text` within `max_bytes` that does not split a UTF-8 sequence.
std::string_view Utf8Prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

// `text` within `max_bytes`, "..." included when it had to be cut.
std::string Cut(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::string out(Utf8Prefix(text, max_bytes > 3 ? max_bytes - 3 : 0));
  out += "...";
  return out;
}

// JSON text of a string. The replacing handler: a Json built in C++ may hold bytes that are not
// UTF-8, and the default handler would throw on them.
std::string JsonString(std::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool IsIdentifier(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$';
    if (!letter && (i == 0 || c < '0' || c > '9')) return false;
  }
  return true;
}

// A property or member name as TypeScript writes it: bare when it is an identifier, else quoted.
std::string Key(std::string_view name) { return IsIdentifier(name) ? std::string(name) : JsonString(name); }

std::string Plural(uint64_t count, std::string_view noun) {
  std::string out = std::to_string(count) + " " + std::string(noun);
  if (count != 1) out += "s";
  return out;
}

size_t CodePoints(std::string_view text) {
  size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

// Appends a JSON string for `text`, its head only when `out` would pass `limit`; false when cut.
bool AppendJsonString(std::string_view text, std::string& out, size_t limit) {
  std::string_view head = Utf8Prefix(text, limit > out.size() ? limit - out.size() : 0);
  out += JsonString(head);
  return head.size() == text.size() && out.size() <= limit;
}

// Appends JSON for `value` until `out` reaches `limit` bytes; false when it stopped short. Each
// level adds a byte before it recurses, so the recursion is as deep as `limit` at most.
bool AppendJson(const Json& value, std::string& out, size_t limit) {
  if (out.size() >= limit) return false;
  if (value.is_object() || value.is_array()) {
    bool object = value.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += ',';
      first = false;
      if (object) {
        if (!AppendJsonString(it.key(), out, limit)) return false;
        out += ':';
      }
      if (!AppendJson(it.value(), out, limit)) return false;
      if (out.size() >= limit) return false;
    }
    out += object ? '}' : ']';
    return out.size() <= limit;
  }
  if (value.is_string()) return AppendJsonString(value.get_ref<const std::string&>(), out, limit);
  out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return out.size() <= limit;
}

// A value as a message shows it: JSON, cut. Never serializes more than it shows.
std::string Show(const Json& value) {
  std::string out;
  if (AppendJson(value, out, kMaxShownValueBytes + 1) && out.size() <= kMaxShownValueBytes) return out;
  return std::string(Utf8Prefix(out, kMaxShownValueBytes - 3)) + "...";
}

std::string ShowName(std::string_view name) {
  if (name.size() <= kMaxShownValueBytes) return JsonString(name);
  return JsonString(Utf8Prefix(name, kMaxShownValueBytes - 3)) + "...";
}

const char* TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::object: return "object";
    case Json::value_t::array: return "array";
    case Json::value_t::string: return "string";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "number";
    default: return "non-JSON value";
  }
}

std::string Got(const Json& value) {
  if (value.is_null()) return "got null";
  return std::string("got ") + TypeName(value) + " (" + Show(value) + ")";
}

// --- JSON: members, counts, order, pointers --------------------------------------------------------

const Json* Member(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool IsTrue(const Json* value) { return value && value->is_boolean() && value->get<bool>(); }
bool IsFalse(const Json* value) { return value && value->is_boolean() && !value->get<bool>(); }
bool IsSchema(const Json* value) { return value && (value->is_object() || value->is_boolean()); }

// A count keyword's value (minLength, maxItems, ...): a non-negative integer, else absent.
std::optional<uint64_t> Count(const Json* value) {
  if (!value) return std::nullopt;
  if (value->is_number_unsigned()) return value->get<uint64_t>();
  if (value->is_number_integer()) {
    int64_t n = value->get<int64_t>();
    if (n >= 0) return static_cast<uint64_t>(n);
    return std::nullopt;
  }
  if (value->is_number_float()) {
    double d = value->get<double>();
    if (std::isfinite(d) && d >= 0 && d < 18446744073709551616.0 && std::trunc(d) == d) return static_cast<uint64_t>(d);
  }
  return std::nullopt;
}

long double NumberValue(const Json& value) {
  if (value.is_number_unsigned()) return static_cast<long double>(value.get<uint64_t>());
  if (value.is_number_integer()) return static_cast<long double>(value.get<int64_t>());
  return static_cast<long double>(value.get<double>());
}

// Numbers compared by value, exactly (1 and 1.0 are equal, as JSON Schema says). A NaN (only a
// Json built in C++ can hold one) sorts after every number, so the order stays total.
int CompareNumbers(const Json& a, const Json& b) {
  if (a.is_number_integer() && b.is_number_integer()) {
    bool a_unsigned = a.is_number_unsigned(), b_unsigned = b.is_number_unsigned();
    if (!a_unsigned && a.get<int64_t>() < 0) {
      if (b_unsigned || b.get<int64_t>() >= 0) return -1;
      int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (!b_unsigned && b.get<int64_t>() < 0) return 1;
    uint64_t x = a_unsigned ? a.get<uint64_t>() : static_cast<uint64_t>(a.get<int64_t>());
    uint64_t y = b_unsigned ? b.get<uint64_t>() : static_cast<uint64_t>(b.get<int64_t>());
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  long double x = NumberValue(a), y = NumberValue(b);
  bool x_nan = std::isnan(x), y_nan = std::isnan(y);
  if (x_nan || y_nan) return static_cast<int>(x_nan) - static_cast<int>(y_nan);
  return x < y ? -1 : (x > y ? 1 : 0);
}

int TypeRank(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return 0;
    case Json::value_t::boolean: return 1;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return 2;
    case Json::value_t::string: return 3;
    case Json::value_t::array: return 4;
    case Json::value_t::object: return 5;
    case Json::value_t::binary: return 6;
    default: return 7;
  }
}

// A total order on JSON values whose equality is JSON Schema's (numbers by value, objects by
// members whatever their order). Adds to `work` the values it looked at (a long string counts as
// several), for the check's bound. It recurses as deep as the values nest, as nlohmann's own
// comparison does; the worker's JSON nests at most kMaxJsonDepth levels.
int CompareJson(const Json& a, const Json& b, size_t& work) {
  ++work;
  int rank_a = TypeRank(a), rank_b = TypeRank(b);
  if (rank_a != rank_b) return rank_a < rank_b ? -1 : 1;
  switch (rank_a) {
    case 1: return static_cast<int>(a.get<bool>()) - static_cast<int>(b.get<bool>());
    case 2: return CompareNumbers(a, b);
    case 3: {
      work += std::min(a.get_ref<const std::string&>().size(), b.get_ref<const std::string&>().size()) / 1024;
      int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    case 4: {
      size_t n = std::min(a.size(), b.size());
      for (size_t i = 0; i < n; ++i) {
        if (int c = CompareJson(a[i], b[i], work)) return c;
      }
      return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
    }
    case 5: {
      if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
      for (auto x = a.begin(), y = b.begin(); x != a.end(); ++x, ++y) {
        int c = x.key().compare(y.key());
        if (c != 0) return c < 0 ? -1 : 1;
        if (int v = CompareJson(x.value(), y.value(), work)) return v;
      }
      return 0;
    }
    case 6: {
      const auto& x = a.get_binary();
      const auto& y = b.get_binary();
      return x < y ? -1 : (y < x ? 1 : 0);
    }
    default: return 0;
  }
}

std::string PercentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// A local $ref ("#", "#/$defs/Name", "#/definitions/a~1b", any JSON pointer in the URI fragment)
// resolved in `root`; nullptr for anything else (remote, anchors, a pointer to nothing).
const Json* Resolve(const Json& root, std::string_view ref) {
  if (ref.empty() || ref[0] != '#') return nullptr;
  std::string pointer = PercentDecode(ref.substr(1));
  if (!pointer.empty() && pointer[0] != '/') return nullptr;
  const Json* at = &root;
  size_t pos = 0;
  while (pos < pointer.size()) {
    size_t next = pointer.find('/', pos + 1);
    if (next == std::string::npos) next = pointer.size();
    std::string token;
    for (size_t i = pos + 1; i < next; ++i) {
      if (pointer[i] != '~') {
        token += pointer[i];
        continue;
      }
      if (i + 1 >= next || (pointer[i + 1] != '0' && pointer[i + 1] != '1')) return nullptr;
      token += pointer[i + 1] == '0' ? '~' : '/';
      ++i;
    }
    if (at->is_object()) {
      auto it = at->find(token);
      if (it == at->end()) return nullptr;
      at = &*it;
    } else if (at->is_array()) {
      if (token.empty() || token.size() > 19 || (token.size() > 1 && token[0] == '0')) return nullptr;
      if (!std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; })) return nullptr;
      uint64_t index = std::stoull(token);
      if (index >= at->size()) return nullptr;
      at = &(*at)[index];
    } else {
      return nullptr;
    }
    pos = next;
  }
  return at;
}

// --- TypeScript ----------------------------------------------------------------------------------

// How tightly a type binds, for parentheses: `(A | B)[]`, `(A | B) & C`.
enum Precedence { kUnionType = 0, kIntersectionType = 1, kPrimaryType = 2 };

struct TsType {
  std::string text;
  int precedence = kPrimaryType;
};

TsType Primary(std::string text) { return {std::move(text), kPrimaryType}; }
TsType Unknown() { return Primary("unknown"); }
TsType Never() { return Primary("never"); }

std::string Wrapped(const TsType& type, int at_least) {
  return type.precedence < at_least ? "(" + type.text + ")" : type.text;
}

// The types once each, in their order (a set: a choice may have thousands of branches).
std::vector<const TsType*> Distinct(const std::vector<TsType>& types, std::string_view drop) {
  std::vector<const TsType*> kept;
  std::set<std::string_view> seen;
  for (const TsType& t : types) {
    if (t.text != drop && seen.insert(t.text).second) kept.push_back(&t);
  }
  return kept;
}

TsType Union(const std::vector<TsType>& alternatives) {
  for (const TsType& t : alternatives) {
    if (t.text == "unknown") return Unknown();
  }
  std::vector<const TsType*> kept = Distinct(alternatives, "never");
  if (kept.empty()) return Never();
  if (kept.size() == 1) return *kept[0];
  std::string text;
  for (const TsType* t : kept) text += (text.empty() ? "" : " | ") + t->text;
  return {std::move(text), kUnionType};
}

TsType Intersection(const std::vector<TsType>& parts) {
  for (const TsType& t : parts) {
    if (t.text == "never") return Never();
  }
  std::vector<const TsType*> kept = Distinct(parts, "unknown");
  if (kept.empty()) return Unknown();
  if (kept.size() == 1) return *kept[0];
  std::string text;
  for (const TsType* t : kept) text += (text.empty() ? "" : " & ") + Wrapped(*t, kIntersectionType);
  return {std::move(text), kIntersectionType};
}

std::optional<TsType> Literal(const Json& value) {
  if (value.is_string()) return Primary(JsonString(value.get_ref<const std::string&>()));
  if (value.is_number() || value.is_boolean() || value.is_null()) {
    return Primary(value.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
  return std::nullopt;
}

// Where a line of description goes: inside a JSDoc comment, "*/" is made harmless ("*\/").
enum class LineUse { kComment, kPlain };

// A description on one line, for inline JSDoc and list_tools: control characters and line breaks
// become spaces, runs of spaces one, cut.
std::string OneLine(std::string_view text, size_t max_bytes, LineUse use) {
  std::string out;
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    if (use == LineUse::kComment && c == '/' && !out.empty() && out.back() == '*') out += '\\';
    out += c;
    if (out.size() > max_bytes + 8) break;  // enough to know it must be cut
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return Cut(out, max_bytes);
}

// One property of an object type.
struct TsMember {
  std::string doc;  // one line, safe inside /** */
  std::string name;
  bool optional = false;
  TsType type;
};

std::string MemberText(const TsMember& member) {
  std::string text;
  if (!member.doc.empty()) text += "/** " + member.doc + " */ ";
  return text + Key(member.name) + (member.optional ? "?: " : ": ") + member.type.text;
}

// Renders schemas as TypeScript, resolving $refs against one root, within the bounds.
class TypeWriter {
 public:
  explicit TypeWriter(const Json& root) : root_(root) {}

  TsType Type(const Json& schema, int depth) {
    if (depth > kMaxTypeScriptDepth || nodes_ >= kMaxTypeScriptNodes || bytes_ > kMaxTypeScriptBytes) return Unknown();
    ++nodes_;
    if (schema.is_boolean()) return schema.get<bool>() ? Unknown() : Never();
    if (!schema.is_object()) return Unknown();
    std::vector<TsType> parts;
    if (const Json* ref = Member(schema, "$ref"); ref && ref->is_string()) {
      const Json* target = ResolveRef(*ref);
      if (target && std::find(expanding_.begin(), expanding_.end(), target) == expanding_.end()) {
        expanding_.push_back(target);
        parts.push_back(Type(*target, depth + 1));
        expanding_.pop_back();
      }
    }
    if (const Json* constant = Member(schema, "const")) {
      parts.push_back(Literal(*constant).value_or(Unknown()));
    } else if (const Json* values = Member(schema, "enum"); values && values->is_array() && !values->empty()) {
      parts.push_back(Enum(*values));
    } else {
      parts.push_back(Base(schema, depth));
    }
    for (const char* choice : {"anyOf", "oneOf"}) {
      const Json* branches = Member(schema, choice);
      if (!branches || !branches->is_array() || branches->empty()) continue;
      std::vector<TsType> alternatives;
      for (const Json& branch : *branches) alternatives.push_back(Type(branch, depth + 1));
      parts.push_back(Union(alternatives));
    }
    if (const Json* all = Member(schema, "allOf"); all && all->is_array()) {
      for (const Json& branch : *all) parts.push_back(Type(branch, depth + 1));
    }
    TsType type = Intersection(parts);
    if (IsTrue(Member(schema, "nullable")) && type.text != "unknown") type = Union({type, Primary("null")});
    bytes_ += type.text.size();
    return type;
  }

  // An object schema's properties: the required first, then the optional, each in name order (a
  // Json object keeps its members sorted, so the schema's own order is not known here). A name
  // that is required but has no schema is `unknown`.
  std::vector<TsMember> Members(const Json& schema, int depth) {
    std::set<std::string> required;
    if (const Json* names = Member(schema, "required"); names && names->is_array()) {
      for (const Json& name : *names) {
        if (required.size() >= kMaxTypeScriptNodes) break;
        if (name.is_string()) required.insert(name.get<std::string>());
      }
    }
    const Json* properties = Member(schema, "properties");
    if (properties && !properties->is_object()) properties = nullptr;
    std::vector<TsMember> members;
    for (bool want_required : {true, false}) {
      if (properties) {
        for (auto it = properties->begin(); it != properties->end(); ++it) {
          if (nodes_ >= kMaxTypeScriptNodes || bytes_ > kMaxTypeScriptBytes) return members;
          if (required.count(it.key()) != static_cast<size_t>(want_required)) continue;
          std::string doc = Doc(it.value());
          bytes_ += doc.size() + it.key().size() + 16;  // the member's text around its type
          members.push_back({std::move(doc), it.key(), !want_required, Type(it.value(), depth + 1)});
        }
      }
    }
    for (const std::string& name : required) {
      if (properties && properties->contains(name)) continue;
      if (++nodes_ >= kMaxTypeScriptNodes) break;
      members.push_back({"", name, false, Unknown()});
    }
    return members;
  }

  // The index signature's type when additionalProperties is a schema that says something.
  std::optional<TsType> Extra(const Json& schema, int depth) {
    const Json* additional = Member(schema, "additionalProperties");
    if (!additional || !additional->is_object() || additional->empty()) return std::nullopt;
    return Type(*additional, depth + 1);
  }

 private:
  // A $ref resolved, its length counted: a long pointer costs as many nodes as it is long.
  const Json* ResolveRef(const Json& ref) {
    const std::string& text = ref.get_ref<const std::string&>();
    nodes_ += text.size() / 64;
    return Resolve(root_, text);
  }

  TsType Enum(const Json& values) {
    nodes_ += values.size();  // however many, rendered once within the budget
    std::vector<TsType> alternatives;
    bool literals = values.size() <= kMaxEnumLiterals;
    for (const Json& value : values) {
      std::optional<TsType> literal = Literal(value);
      if (!literal) return Unknown();
      alternatives.push_back(literals ? *literal : Primary(value.is_number() ? "number" : TypeName(value)));
    }
    return Union(alternatives);
  }

  TsType Base(const Json& schema, int depth) {
    std::vector<std::string> names;
    if (const Json* type = Member(schema, "type")) {
      if (type->is_string()) names.push_back(type->get<std::string>());
      if (type->is_array()) {
        for (const Json& name : *type) {
          if (names.size() >= 8) break;
          if (name.is_string()) names.push_back(name.get<std::string>());
        }
      }
    }
    if (names.empty()) {
      if (Member(schema, "properties") || Member(schema, "additionalProperties") || Member(schema, "required")) {
        names.push_back("object");
      } else if (Member(schema, "items") || Member(schema, "prefixItems")) {
        names.push_back("array");
      } else {
        return Unknown();
      }
    }
    std::vector<TsType> alternatives;
    for (const std::string& name : names) {
      if (name == "string" || name == "boolean" || name == "null") alternatives.push_back(Primary(name));
      else if (name == "number" || name == "integer") alternatives.push_back(Primary("number"));
      else if (name == "object") alternatives.push_back(Object(schema, depth));
      else if (name == "array") alternatives.push_back(Array(schema, depth));
      else alternatives.push_back(Unknown());
    }
    return Union(alternatives);
  }

  TsType Object(const Json& schema, int depth) {
    std::vector<TsMember> members = Members(schema, depth);
    std::optional<TsType> extra = Extra(schema, depth);
    if (members.empty()) {
      if (IsFalse(Member(schema, "additionalProperties"))) return Primary("Record<string, never>");
      return Primary("Record<string, " + (extra ? extra->text : "unknown") + ">");
    }
    std::string text = "{ ";
    for (size_t i = 0; i < members.size(); ++i) text += (i ? "; " : "") + MemberText(members[i]);
    if (extra) text += "; [key: string]: " + extra->text;
    return Primary(text + " }");
  }

  TsType Array(const Json& schema, int depth) {
    const Json* prefix = Member(schema, "prefixItems");
    const Json* items = Member(schema, "items");
    const Json* rest = items;
    if (!prefix || !prefix->is_array()) {
      prefix = nullptr;
      if (items && items->is_array()) {
        prefix = items;
        rest = Member(schema, "additionalItems");
      }
    }
    if (!IsSchema(rest)) rest = nullptr;
    if (!prefix) return Primary(rest ? Wrapped(Type(*rest, depth + 1), kPrimaryType) + "[]" : "unknown[]");
    std::string text = "[";
    for (const Json& element : *prefix) text += (text.size() > 1 ? ", " : "") + Type(element, depth + 1).text;
    if (!IsFalse(rest)) {
      std::string tail = rest ? Wrapped(Type(*rest, depth + 1), kPrimaryType) + "[]" : "unknown[]";
      text += (text.size() > 1 ? ", ..." : "...") + tail;
    }
    return Primary(text + "]");
  }

  // A property's inline JSDoc: its description (or its $ref target's) and its default.
  std::string Doc(const Json& schema) {
    const Json* description = Member(schema, "description");
    if (!description) {
      if (const Json* ref = Member(schema, "$ref"); ref && ref->is_string()) {
        if (const Json* target = ResolveRef(*ref)) description = Member(*target, "description");
      }
    }
    std::string doc;
    if (description && description->is_string()) {
      doc = OneLine(description->get_ref<const std::string&>(), kMaxPropertyDescriptionBytes, LineUse::kComment);
    }
    if (const Json* fallback = Member(schema, "default"); fallback && Literal(*fallback)) {
      doc += (doc.empty() ? "(default: " : " (default: ") + OneLine(Show(*fallback), kMaxShownValueBytes, LineUse::kComment) + ")";
    }
    return doc;
  }

  const Json& root_;
  size_t nodes_ = 0;
  size_t bytes_ = 0;
  std::vector<const Json*> expanding_;  // the $ref targets being rendered: one met again is a cycle
};

// --- The check -----------------------------------------------------------------------------------

// A step from the root to the value being checked, kept on the stack and rendered only for a
// problem ("args.edits[0].oldText").
struct PathStep {
  const PathStep* parent;
  const std::string* key;  // nullptr: an array index
  size_t index;
};

constexpr size_t kMaxPathBytes = 200;  // a longer path keeps its end: "args...children[0].name"

size_t PathSteps(const PathStep* step) {
  size_t count = 0;
  for (; step; step = step->parent) ++count;
  return count;
}

// The path as a message names it, rendered from the inside out so that a deep path costs no more
// than the bytes it shows.
std::string RenderPath(std::string_view root, const PathStep* step) {
  std::vector<std::string> segments;
  size_t bytes = 0;
  for (; step && bytes <= kMaxPathBytes; step = step->parent) {
    if (!step->key) segments.push_back("[" + std::to_string(step->index) + "]");
    else if (IsIdentifier(*step->key) && step->key->size() <= kMaxShownValueBytes) segments.push_back("." + *step->key);
    else segments.push_back("[" + ShowName(*step->key) + "]");
    bytes += segments.back().size();
  }
  std::string out(root);
  if (step) out += "...";
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) out += *it;
  return out;
}

enum class ProblemKind {
  kType,   // the value's JSON type is not the schema's: a choice whose type differs says little
  kOther,  // anything else the value got wrong
  kBound,  // a bound of the check was reached: ends the whole check, whatever anyOf or not say
};

struct Problem {
  ProblemKind kind;
  std::string path;
  size_t path_steps;  // the same value has the same count: problems are found at or below it
  std::string text;
  std::vector<std::string> expected;  // kType: the type names the schema wanted

  std::string Message() const { return Cut(path + ": " + text, kMaxProblemBytes); }
};

constexpr size_t kMaxChoicesShown = 4;
constexpr size_t kMaxExpectedNames = 16;
constexpr size_t kMaxListBytes = 160;  // an enum's values or the allowed properties in a problem

// The keywords the check reads, in byte order (as a Json object keeps its members).
enum Keyword {
  kRef,
  kAdditionalItems,
  kAdditionalProperties,
  kAllOf,
  kAnyOf,
  kConst,
  kEnum,
  kExclusiveMaximum,
  kExclusiveMinimum,
  kItems,
  kMaxItems,
  kMaxLength,
  kMaxProperties,
  kMaximum,
  kMinItems,
  kMinLength,
  kMinProperties,
  kMinimum,
  kNot,
  kNullable,
  kOneOf,
  kPatternProperties,
  kPrefixItems,
  kProperties,
  kRequired,
  kType,
  kUniqueItems,
  kKeywordCount
};
constexpr std::string_view kKeywordNames[kKeywordCount] = {
    "$ref",
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "const",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "not",
    "nullable",
    "oneOf",
    "patternProperties",
    "prefixItems",
    "properties",
    "required",
    "type",
    "uniqueItems",
};

// One subschema's keywords, found in one pass: a subschema is applied once per value it checks,
// and looking each keyword up in turn cost more than the check itself.
class Keywords {
 public:
  explicit Keywords(const Json& schema) {
    if (schema.size() <= kKeywordCount) {
      for (auto it = schema.begin(); it != schema.end(); ++it) {
        const auto* end = std::end(kKeywordNames);
        const auto* found = std::lower_bound(std::begin(kKeywordNames), end, std::string_view(it.key()));
        if (found != end && *found == it.key()) at_[static_cast<size_t>(found - std::begin(kKeywordNames))] = &it.value();
      }
      return;
    }
    // Many members (most not keywords): look each keyword up instead, so the cost stays the
    // keywords', not the members'.
    for (size_t i = 0; i < kKeywordCount; ++i) {
      auto it = schema.find(std::string(kKeywordNames[i]));
      if (it != schema.end()) at_[i] = &*it;
    }
  }
  const Json* operator[](Keyword keyword) const { return at_[keyword]; }

 private:
  std::array<const Json*, kKeywordCount> at_{};
};

class Checker {
 public:
  Checker(const Json& root_schema, std::string_view root) : root_schema_(root_schema), root_(root) {}

  std::optional<Problem> Check(const Json& schema, const Json& value, const PathStep* at, int depth) {
    if (depth > kMaxSchemaDepth) {
      return Make(ProblemKind::kBound, at,
                  "schema nesting deeper than " + std::to_string(kMaxSchemaDepth) +
                      " ($refs and nested values together): basal does not check arguments this deep; send flatter "
                      "arguments, or ask the operator about this tool's schema");
    }
    if (auto p = Spend(1, at)) return p;
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return std::nullopt;
      return Make(ProblemKind::kOther, at, "no value is allowed here (the tool's schema is false)");
    }
    if (!schema.is_object()) return std::nullopt;
    Keywords keywords(schema);
    if (const Json* ref = keywords[kRef]; ref && ref->is_string()) {
      const std::string& target_ref = ref->get_ref<const std::string&>();
      if (auto p = Spend(1 + target_ref.size() / 16, at)) return p;
      if (const Json* target = Resolve(root_schema_, target_ref)) {
        if (auto p = Check(*target, value, at, depth + 1)) return p;
      }
    }
    if (auto p = CheckType(keywords, value, at)) return p;
    if (auto p = CheckValues(keywords, value, at)) return p;
    if (value.is_number()) {
      if (auto p = CheckNumber(keywords, value, at)) return p;
    } else if (value.is_string()) {
      if (auto p = CheckString(keywords, value, at)) return p;
    } else if (value.is_array()) {
      if (auto p = CheckArray(keywords, value, at, depth)) return p;
    } else if (value.is_object()) {
      if (auto p = CheckObject(keywords, value, at, depth)) return p;
    }
    return CheckChoices(keywords, value, at, depth);
  }

 private:
  Problem Make(ProblemKind kind, const PathStep* at, std::string text, std::vector<std::string> expected = {}) const {
    return Problem{kind, RenderPath(root_, at), PathSteps(at), std::move(text), std::move(expected)};
  }
  Problem Other(const PathStep* at, std::string text) const { return Make(ProblemKind::kOther, at, std::move(text)); }

  // Counts `steps` of work; the bound's problem once they are spent.
  std::optional<Problem> Spend(size_t steps, const PathStep* at) {
    steps_ = steps > kMaxCheckSteps ? kMaxCheckSteps + 1 : steps_ + steps;
    if (steps_ <= kMaxCheckSteps) return std::nullopt;
    return Make(ProblemKind::kBound, at,
                "too complex to check (more than " + std::to_string(kMaxCheckSteps) +
                    " steps against the tool's input schema): send smaller arguments");
  }

  // Equal as JSON Schema says, the comparison's work spent.
  std::optional<Problem> Equal(const Json& a, const Json& b, const PathStep* at, bool& equal) {
    size_t work = 0;
    equal = CompareJson(a, b, work) == 0;
    return Spend(work, at);
  }

  std::optional<Problem> CheckType(const Keywords& keywords, const Json& value, const PathStep* at) {
    const Json* type = keywords[kType];
    if (!type || !(type->is_string() || type->is_array())) return std::nullopt;
    if (type->is_array()) {
      if (auto p = Spend(type->size(), at)) return p;
    }
    // The names are collected only for a problem: a match costs no allocation.
    bool known = false;
    auto fits = [&](const Json& name) {
      std::optional<bool> fit = TypeFits(name, value);
      known = known || fit.has_value();
      return fit.value_or(false);
    };
    if (type->is_string() ? fits(*type) : std::any_of(type->begin(), type->end(), fits)) return std::nullopt;
    if (!known) return std::nullopt;  // no JSON Schema type named: as if absent
    if (IsTrue(keywords[kNullable]) && value.is_null()) return std::nullopt;  // OpenAPI's "or null"
    std::vector<std::string> names;
    auto add = [&](const Json& name) {
      if (names.size() < kMaxExpectedNames && TypeFits(name, value).has_value() &&
          std::find(names.begin(), names.end(), name.get_ref<const std::string&>()) == names.end()) {
        names.push_back(name.get<std::string>());
      }
    };
    if (type->is_string()) add(*type);
    else std::for_each(type->begin(), type->end(), add);
    if (IsTrue(keywords[kNullable])) names.push_back("null");
    std::string expected;
    for (const std::string& n : names) expected += (expected.empty() ? "" : " or ") + n;
    return Make(ProblemKind::kType, at, "expected " + expected + ", " + Got(value), std::move(names));
  }

  // Whether `value` is of the type `name` names; nullopt when `name` is no JSON Schema type.
  static std::optional<bool> TypeFits(const Json& name, const Json& value) {
    if (!name.is_string()) return std::nullopt;
    const std::string& n = name.get_ref<const std::string&>();
    if (n == "null") return value.is_null();
    if (n == "boolean") return value.is_boolean();
    if (n == "object") return value.is_object();
    if (n == "array") return value.is_array();
    if (n == "string") return value.is_string();
    if (n == "number") return value.is_number();
    if (n == "integer") return IsInteger(value);
    return std::nullopt;
  }

  static bool IsInteger(const Json& value) {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    double d = value.get<double>();
    return std::isfinite(d) && std::trunc(d) == d;
  }

  std::optional<Problem> CheckValues(const Keywords& keywords, const Json& value, const PathStep* at) {
    bool equal = false;
    if (const Json* constant = keywords[kConst]) {
      if (auto p = Equal(*constant, value, at, equal)) return p;
      if (!equal) return Other(at, "must be " + Show(*constant) + " (got " + Show(value) + ")");
    }
    const Json* values = keywords[kEnum];
    if (!values || !values->is_array()) return std::nullopt;
    if (values->empty()) return Other(at, "no value is allowed here (the tool's schema has an empty enum)");
    for (const Json& allowed : *values) {
      if (auto p = Equal(allowed, value, at, equal)) return p;
      if (equal) return std::nullopt;
    }
    std::string list;
    for (const Json& allowed : *values) {
      if (list.size() > kMaxListBytes) {
        list += ", ...";
        break;
      }
      list += (list.empty() ? "" : ", ") + Show(allowed);
    }
    return Other(at, "must be one of " + list + " (got " + Show(value) + ")");
  }

  std::optional<Problem> CheckNumber(const Keywords& keywords, const Json& value, const PathStep* at) {
    // Draft-07 writes exclusive bounds as numbers; draft-04 as booleans beside minimum/maximum.
    const Json* minimum = keywords[kMinimum];
    const Json* maximum = keywords[kMaximum];
    const Json* exclusive_minimum = keywords[kExclusiveMinimum];
    const Json* exclusive_maximum = keywords[kExclusiveMaximum];
    auto refuse = [&](const char* relation, const Json& bound) {
      return Other(at, std::string("must be ") + relation + " " + Show(bound) + " (got " + Show(value) + ")");
    };
    if (minimum && minimum->is_number()) {
      bool exclusive = IsTrue(exclusive_minimum);
      int c = CompareNumbers(value, *minimum);
      if (c < 0 || (exclusive && c == 0)) return refuse(exclusive ? ">" : ">=", *minimum);
    }
    if (exclusive_minimum && exclusive_minimum->is_number() && CompareNumbers(value, *exclusive_minimum) <= 0) {
      return refuse(">", *exclusive_minimum);
    }
    if (maximum && maximum->is_number()) {
      bool exclusive = IsTrue(exclusive_maximum);
      int c = CompareNumbers(value, *maximum);
      if (c > 0 || (exclusive && c == 0)) return refuse(exclusive ? "<" : "<=", *maximum);
    }
    if (exclusive_maximum && exclusive_maximum->is_number() && CompareNumbers(value, *exclusive_maximum) >= 0) {
      return refuse("<", *exclusive_maximum);
    }
    return std::nullopt;
  }

  std::optional<Problem> CheckString(const Keywords& keywords, const Json& value, const PathStep* at) {
    std::optional<uint64_t> min = Count(keywords[kMinLength]);
    std::optional<uint64_t> max = Count(keywords[kMaxLength]);
    if (!min && !max) return std::nullopt;
    const std::string& text = value.get_ref<const std::string&>();
    if (auto p = Spend(text.size() / 1024, at)) return p;  // a long string checked under many choices
    size_t length = CodePoints(text);
    if (min && length < *min) {
      return Other(at, "must be at least " + Plural(*min, "character") + " long (got " + std::to_string(length) + ")");
    }
    if (max && length > *max) {
      return Other(at, "must be at most " + Plural(*max, "character") + " long (got " + std::to_string(length) + ")");
    }
    return std::nullopt;
  }

  std::optional<Problem> CheckArray(const Keywords& keywords, const Json& value, const PathStep* at, int depth) {
    size_t n = value.size();
    if (std::optional<uint64_t> min = Count(keywords[kMinItems]); min && n < *min) {
      return Other(at, "must have at least " + Plural(*min, "item") + " (got " + std::to_string(n) + ")");
    }
    if (std::optional<uint64_t> max = Count(keywords[kMaxItems]); max && n > *max) {
      return Other(at, "must have at most " + Plural(*max, "item") + " (got " + std::to_string(n) + ")");
    }
    // Positional schemas: 2020-12's prefixItems (then items for the rest), or draft-07's items
    // array (then additionalItems for the rest).
    const Json* positional = keywords[kPrefixItems];
    const Json* rest = keywords[kItems];
    if (!positional || !positional->is_array()) {
      positional = nullptr;
      if (rest && rest->is_array()) {
        positional = rest;
        rest = keywords[kAdditionalItems];
      }
    }
    if (!IsSchema(rest)) rest = nullptr;
    size_t fixed = positional ? positional->size() : 0;
    for (size_t i = 0; i < n; ++i) {
      const Json* item_schema = i < fixed ? &(*positional)[i] : rest;
      if (!item_schema) break;
      if (i >= fixed && IsFalse(item_schema)) {
        return Other(at, "must have at most " + Plural(fixed, "item") + " (got " + std::to_string(n) + ")");
      }
      PathStep step{at, nullptr, i};
      if (auto p = Check(*item_schema, value[i], &step, depth + 1)) return p;
    }
    if (IsTrue(keywords[kUniqueItems]) && n > 1) {
      // Sorted rather than compared pairwise: n log n comparisons. Their work is counted as they
      // go and spent after the sort, which cannot stop half way; each comparison ends at the
      // smaller value, so the sort's whole work is near the array's size times log n.
      if (auto p = Spend(n * static_cast<size_t>(std::bit_width(n)), at)) return p;
      size_t work = 0;
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return CompareJson(value[a], value[b], work) < 0; });
      if (auto p = Spend(work, at)) return p;
      for (size_t k = 1; k < n; ++k) {
        bool equal = false;
        if (auto p = Equal(value[order[k - 1]], value[order[k]], at, equal)) return p;
        if (!equal) continue;
        size_t first = std::min(order[k - 1], order[k]), second = std::max(order[k - 1], order[k]);
        return Other(at, "items " + std::to_string(first) + " and " + std::to_string(second) +
                             " are equal, and the items must be unique (both " + Show(value[first]) + ")");
      }
    }
    return std::nullopt;
  }

  std::optional<Problem> CheckObject(const Keywords& keywords, const Json& value, const PathStep* at, int depth) {
    const Json* properties = keywords[kProperties];
    if (properties && !properties->is_object()) properties = nullptr;
    const Json* additional = keywords[kAdditionalProperties];
    const Json* patterns = keywords[kPatternProperties];
    // Properties a pattern admits are not additional; patterns are not checked here, so neither is
    // additionalProperties beside them (the downstream server checks both).
    bool has_patterns = patterns && patterns->is_object() && !patterns->empty();
    if (IsSchema(additional) && !IsTrue(additional) && !has_patterns) {
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (auto p = Spend(1, at)) return p;
        if (properties && properties->contains(it.key())) continue;
        if (IsFalse(additional)) {
          return Other(at, "unexpected property " + ShowName(it.key()) + " (" + Allowed(properties, keywords[kRequired]) + ")");
        }
        PathStep step{at, &it.key(), 0};
        if (auto p = Check(*additional, it.value(), &step, depth + 1)) return p;
      }
    }
    if (const Json* required = keywords[kRequired]; required && required->is_array()) {
      for (const Json& name : *required) {
        if (auto p = Spend(1, at)) return p;
        if (name.is_string() && !value.contains(name.get_ref<const std::string&>())) {
          return Other(at, "missing required property " + ShowName(name.get_ref<const std::string&>()));
        }
      }
    }
    if (properties) {
      // Both objects keep their members sorted by name, so walking the smaller one meets the
      // shared names in the same order either way.
      bool walk_value = value.size() < properties->size();
      const Json& walked = walk_value ? value : *properties;
      const Json& other = walk_value ? *properties : value;
      for (auto it = walked.begin(); it != walked.end(); ++it) {
        if (auto p = Spend(1, at)) return p;
        auto found = other.find(it.key());
        if (found == other.end()) continue;
        PathStep step{at, &it.key(), 0};
        const Json& property_schema = walk_value ? *found : it.value();
        const Json& property_value = walk_value ? it.value() : *found;
        if (auto p = Check(property_schema, property_value, &step, depth + 1)) return p;
      }
    }
    if (std::optional<uint64_t> min = Count(keywords[kMinProperties]); min && value.size() < *min) {
      return Other(at, "must have at least " + Plural(*min, "property") + " (got " + std::to_string(value.size()) + ")");
    }
    if (std::optional<uint64_t> max = Count(keywords[kMaxProperties]); max && value.size() > *max) {
      return Other(at, "must have at most " + Plural(*max, "property") + " (got " + std::to_string(value.size()) + ")");
    }
    return std::nullopt;
  }

  // The property names, the required first (as the declarations list them), bounded.
  static std::string Allowed(const Json* properties, const Json* required) {
    if (!properties || properties->empty()) return "no properties are allowed";
    std::vector<std::string> names;
    if (required && required->is_array()) {
      size_t looked = 0;
      for (const Json& name : *required) {
        if (++looked > kMaxExpectedNames) break;
        if (name.is_string() && properties->contains(name.get_ref<const std::string&>()) &&
            std::find(names.begin(), names.end(), name.get_ref<const std::string&>()) == names.end()) {
          names.push_back(name.get<std::string>());
        }
      }
    }
    size_t first_optional = names.size();
    std::string list = "allowed: ";
    auto add = [&](const std::string& name) {
      if (list.size() > kMaxListBytes) return false;
      list += (list.size() > 9 ? ", " : "") + (IsIdentifier(name) ? Cut(name, kMaxShownValueBytes) : ShowName(name));
      return true;
    };
    for (const std::string& name : names) {
      if (!add(name)) return list + ", ...";
    }
    for (auto it = properties->begin(); it != properties->end(); ++it) {
      if (std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(first_optional), it.key()) !=
          names.begin() + static_cast<std::ptrdiff_t>(first_optional)) {
        continue;
      }
      if (!add(it.key())) return list + ", ...";
    }
    return list;
  }

  // What the failed choices of an anyOf or oneOf said, kept bounded however many there are.
  struct Failures {
    std::vector<Problem> shown;           // the first few, for the message
    std::optional<Problem> first_deeper;  // the first that got past the value's type, and how many did
    size_t deeper = 0;
    std::vector<std::string> expected;  // the types wanted by those that did not
  };

  static void Note(Failures& failures, Problem problem, size_t here_steps) {
    if (problem.kind == ProblemKind::kType && problem.path_steps == here_steps) {
      for (const std::string& name : problem.expected) {
        if (failures.expected.size() < kMaxExpectedNames &&
            std::find(failures.expected.begin(), failures.expected.end(), name) == failures.expected.end()) {
          failures.expected.push_back(name);
        }
      }
    } else if (failures.deeper++ == 0) {
      failures.first_deeper = problem;
    }
    if (failures.shown.size() < kMaxChoicesShown) failures.shown.push_back(std::move(problem));
  }

  // The problem of a value no choice admits. Choices that wanted another type say little: when
  // exactly one choice took this type, its own problem is the one to fix; when none did, the types
  // they wanted are.
  Problem NoChoice(const Failures& failures, const Json& value, const PathStep* at, const char* keyword) const {
    if (failures.deeper == 0) {
      std::string expected;
      for (const std::string& n : failures.expected) expected += (expected.empty() ? "" : " or ") + n;
      return Make(ProblemKind::kType, at, "expected " + expected + ", " + Got(value), failures.expected);
    }
    if (failures.deeper == 1) return *failures.first_deeper;
    std::string text = std::string("matches none of the choices (") + keyword + "):";
    for (size_t i = 0; i < failures.shown.size(); ++i) {
      text += (i ? "; (" : " (") + std::to_string(i + 1) + ") " + Cut(failures.shown[i].Message(), 100);
    }
    return Other(at, text);
  }

  std::optional<Problem> CheckChoices(const Keywords& keywords, const Json& value, const PathStep* at, int depth) {
    if (const Json* all = keywords[kAllOf]; all && all->is_array()) {
      for (const Json& branch : *all) {
        if (auto p = Check(branch, value, at, depth + 1)) return p;
      }
    }
    size_t here_steps = PathSteps(at);
    if (const Json* any = keywords[kAnyOf]; any && any->is_array() && !any->empty()) {
      Failures failures;
      bool matched = false;
      for (const Json& branch : *any) {
        std::optional<Problem> p = Check(branch, value, at, depth + 1);
        if (!p) {
          matched = true;
          break;
        }
        if (p->kind == ProblemKind::kBound) return p;
        Note(failures, std::move(*p), here_steps);
      }
      if (!matched) return NoChoice(failures, value, at, "anyOf");
    }
    if (const Json* one = keywords[kOneOf]; one && one->is_array() && !one->empty()) {
      Failures failures;
      std::vector<size_t> matched;
      for (size_t i = 0; i < one->size() && matched.size() < 2; ++i) {
        std::optional<Problem> p = Check((*one)[i], value, at, depth + 1);
        if (!p) {
          matched.push_back(i + 1);
          continue;
        }
        if (p->kind == ProblemKind::kBound) return p;
        Note(failures, std::move(*p), here_steps);
      }
      if (matched.empty()) return NoChoice(failures, value, at, "oneOf");
      if (matched.size() > 1) {
        return Other(at, "matches choices " + std::to_string(matched[0]) + " and " + std::to_string(matched[1]) +
                             " of oneOf, and must match exactly one (got " + Show(value) + ")");
      }
    }
    if (const Json* forbidden = keywords[kNot]; IsSchema(forbidden)) {
      std::optional<Problem> p = Check(*forbidden, value, at, depth + 1);
      if (p && p->kind == ProblemKind::kBound) return p;
      if (!p) return Other(at, "must not match the schema under \"not\" (got " + Show(value) + ")");
    }
    return std::nullopt;
  }

  const Json& root_schema_;
  std::string_view root_;
  size_t steps_ = 0;
};

// --- Declarations --------------------------------------------------------------------------------

// A top-level schema that is only a $ref (zod's "$ref": "#/$defs/Args" beside its $defs) followed
// to what it names, a few hops at most.
const Json& FollowTopRef(const Json& root) {
  const Json* at = &root;
  for (int hop = 0; hop < kMaxTypeScriptDepth; ++hop) {
    const Json* ref = Member(*at, "$ref");
    if (!ref || !ref->is_string() || Member(*at, "properties") || Member(*at, "type")) break;
    const Json* target = Resolve(root, ref->get_ref<const std::string&>());
    if (!target || target == at) break;
    at = target;
  }
  return *at;
}

// An input schema whose properties can be written one a line: an object with properties and
// nothing that would make its type more than those properties.
bool PlainObject(const Json& schema) {
  if (!schema.is_object()) return false;
  const Json* properties = Member(schema, "properties");
  if (!properties || !properties->is_object() || properties->empty()) return false;
  for (const char* keyword : {"$ref", "anyOf", "oneOf", "allOf", "enum", "const", "nullable"}) {
    if (Member(schema, keyword)) return false;
  }
  const Json* type = Member(schema, "type");
  return !type || (type->is_string() && type->get_ref<const std::string&>() == "object");
}

bool RequiresSomething(const Json& schema) {
  const Json* required = Member(schema, "required");
  return required && required->is_array() &&
         std::any_of(required->begin(), required->end(), [](const Json& name) { return name.is_string(); });
}

constexpr size_t kMaxSignatureLineBytes = 120;  // longer, and the arguments go one a line

// A tool's description as a JSDoc block at `indent`: line breaks kept, other control characters
// made spaces, "*/" made harmless, cut.
std::string DocBlock(std::string_view description, const std::string& indent) {
  size_t start = 0;
  while (start < description.size() && std::isspace(static_cast<unsigned char>(description[start]))) ++start;
  std::string text;
  for (size_t i = start; i < description.size() && text.size() <= kMaxToolDescriptionBytes + 8; ++i) {
    char c = description[i];
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '\r') {
      if (i + 1 < description.size() && description[i + 1] == '\n') continue;
      c = '\n';
    } else if ((u < 0x20 && c != '\n') || u == 0x7f) {
      c = ' ';
    }
    if (c == '/' && !text.empty() && text.back() == '*') text += '\\';
    text += c;
  }
  text = Cut(text, kMaxToolDescriptionBytes);
  std::vector<std::string> lines;
  start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return "";
  if (lines.size() == 1 && indent.size() + lines[0].size() + 7 <= kMaxSignatureLineBytes) {
    return indent + "/** " + lines[0] + " */\n";
  }
  std::string block = indent + "/**\n";
  for (const std::string& line : lines) block += indent + (line.empty() ? " *\n" : " * " + line + "\n");
  return block + indent + " */\n";
}

// The member line(s) of one tool: `name(args: {...}): Promise<...>;` at `indent`.
std::string Signature(const ToolDeclaration& tool, const std::string& indent) {
  std::string name = Key(tool.member);
  std::string result = "unknown";
  if (!tool.result_schema.is_null()) {
    TypeWriter writer(tool.result_schema);
    result = writer.Type(tool.result_schema, 0).text;
  }
  std::string tail = "): Promise<" + result + ">;\n";
  const Json& schema = tool.input_schema;
  if (!schema.is_object() && !IsTrue(&schema)) return indent + name + "(args?: Record<string, unknown>" + tail;
  TypeWriter writer(schema);
  const Json& top = FollowTopRef(schema);
  std::string args = RequiresSomething(top) ? "args: " : "args?: ";
  if (!PlainObject(top)) {
    std::string type = writer.Type(schema, 0).text;
    if (type == "unknown") return indent + name + "(args?: Record<string, unknown>" + tail;
    return indent + name + "(" + args + type + tail;
  }
  std::vector<TsMember> members = writer.Members(top, 0);
  std::optional<TsType> extra = writer.Extra(top, 0);
  std::string one_line = indent + name + "(" + args + "{ ";
  for (size_t i = 0; i < members.size(); ++i) one_line += (i ? "; " : "") + MemberText(members[i]);
  if (extra) one_line += "; [key: string]: " + extra->text;
  one_line += " }" + tail;
  if (one_line.size() <= kMaxSignatureLineBytes + 1) return one_line;
  std::string block = indent + name + "(" + args + "{\n";
  for (const TsMember& member : members) {
    if (!member.doc.empty()) block += indent + "  /** " + member.doc + " */\n";
    block += indent + "  " + Key(member.name) + (member.optional ? "?: " : ": ") + member.type.text + ";\n";
  }
  if (extra) block += indent + "  [key: string]: " + extra->text + ";\n";
  return block + indent + "}" + tail;
}

std::string Marker(size_t cut_bytes) {
  return "// ... " + std::to_string(cut_bytes) + " more bytes cut: ask describe_tools for fewer tools\n";
}

// Names as list_tools shows them: control characters made "?", cut.
std::string CleanName(std::string_view name) {
  std::string out = Cut(name, 64);
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return out;
}

// The first sentence or line of a description.
std::string FirstSentence(std::string_view text) {
  size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  size_t end = start;
  for (; end < text.size(); ++end) {
    char c = text[end];
    if (c == '\n' || c == '\r') break;
    if ((c == '.' || c == '!' || c == '?') && end + 1 < text.size() && (text[end + 1] == ' ' || text[end + 1] == '\t')) {
      // "e.g. the path" continues the sentence; "Reads. Then" does not.
      size_t next = end + 1;
      while (next < text.size() && (text[next] == ' ' || text[next] == '\t')) ++next;
      if (next >= text.size() || !(text[next] >= 'a' && text[next] <= 'z')) {
        ++end;
        break;
      }
    }
    if (end - start > kMaxSummaryDescriptionBytes * 2) break;  // cut below anyway
  }
  return OneLine(text.substr(start, end - start), kMaxSummaryDescriptionBytes, LineUse::kPlain);
}

}  // namespace

std::optional<std::string> CheckAgainstSchema(const Json& schema, const Json& value, std::string_view root) {
  Checker checker(schema, root);
  std::optional<Problem> problem = checker.Check(schema, value, nullptr, 0);
  if (!problem) return std::nullopt;
  return problem->Message();
}

std::string TypeScriptType(const Json& schema) {
  TypeWriter writer(schema);
  return writer.Type(schema, 0).text;
}

std::string DeclareTools(const std::vector<ToolDeclaration>& tools, size_t max_bytes) {
  // Groups in their order of first appearance.
  std::vector<std::pair<std::string, std::vector<size_t>>> groups;
  for (size_t i = 0; i < tools.size(); ++i) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == tools[i].group; });
    if (it == groups.end()) it = groups.insert(groups.end(), {tools[i].group, {}});
    it->second.push_back(i);
  }
  const std::string header = "declare const tools: {\n";
  const std::string footer = "};\n";
  const std::string close = "  };\n";
  const size_t marker_reserve = Marker(SIZE_MAX).size();
  // `whole` is the full text while it fits; `kept` is what a cut keeps. Each tool is rendered once
  // and dropped, so memory stays near max_bytes however many tools there are.
  std::string whole = header;
  std::string kept = header;
  size_t full_bytes = header.size() + footer.size();
  bool cut = false;
  bool kept_a_tool = false;
  for (const auto& [group, members] : groups) {
    const std::string open = "  " + Key(group) + ": {\n";
    full_bytes += open.size() + close.size();
    if (full_bytes <= max_bytes) whole += open;
    bool group_open = false;
    for (size_t index : members) {
      std::string block = DocBlock(tools[index].description, "    ") + Signature(tools[index], "    ");
      full_bytes += block.size();
      if (full_bytes <= max_bytes) whole += block;
      if (cut) continue;
      size_t closing = close.size() + footer.size() + marker_reserve;
      size_t opening = group_open ? 0 : open.size();
      if (kept.size() + opening + block.size() + closing <= max_bytes) {
        if (!group_open) kept += open;
        group_open = true;
        kept += block;
        kept_a_tool = true;
        continue;
      }
      cut = true;
      // Not even one whole tool fits: keep the lines of the first that do.
      if (!kept_a_tool && kept.size() + opening + closing <= max_bytes) {
        if (!group_open) kept += open;
        group_open = true;
        size_t start = 0;
        while (start < block.size()) {
          size_t end = block.find('\n', start);
          end = end == std::string::npos ? block.size() : end + 1;
          if (kept.size() + (end - start) + closing > max_bytes) break;
          kept.append(block, start, end - start);
          start = end;
        }
      }
    }
    if (group_open) kept += close;
    if (full_bytes <= max_bytes) whole += close;
  }
  if (full_bytes <= max_bytes) return whole + footer;
  if (header.size() + footer.size() + marker_reserve > max_bytes) return Marker(full_bytes);
  kept += footer;
  return kept + Marker(full_bytes - kept.size());
}

std::string SummaryLine(const ToolDeclaration& tool) {
  std::string line = CleanName(tool.group) + "." + CleanName(tool.member) + "(";
  const Json& top = FollowTopRef(tool.input_schema);
  const Json* properties = Member(top, "properties");
  if (properties && properties->is_object()) {
    std::set<std::string> required;
    if (const Json* names = Member(top, "required"); names && names->is_array()) {
      for (const Json& name : *names) {
        if (name.is_string() && properties->contains(name.get_ref<const std::string&>())) required.insert(name.get<std::string>());
      }
    }
    std::string parameters;
    bool cut = false;
    for (bool want_required : {true, false}) {
      for (auto it = properties->begin(); it != properties->end() && !cut; ++it) {
        if (required.count(it.key()) != static_cast<size_t>(want_required)) continue;
        std::string parameter = CleanName(it.key()) + (want_required ? "" : "?");
        if (parameters.size() + parameter.size() + 2 > kMaxSummaryParametersBytes) {
          cut = true;
          break;
        }
        parameters += (parameters.empty() ? "" : ", ") + parameter;
      }
    }
    if (cut) parameters += parameters.empty() ? "..." : ", ...";
    // One object of named arguments, as the call takes them: braces, so that the line does not read
    // as positional parameters (tools.kv.get(key, namespace) would be a call that fails).
    line += "{" + parameters + "}";
  }
  line += ")";
  std::string sentence = FirstSentence(tool.description);
  if (!sentence.empty()) line += ": " + sentence;
  return line;
}

}  // namespace basal::mcp
