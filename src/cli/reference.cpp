// DescribeCommand: the CLI11 App read into CommandDoc (reference.h), and the one place that says
// what an argument's words are (ValueKindsOf).
#include "cli/reference.h"

#include <algorithm>
#include <utility>

#include <CLI/CLI.hpp>

namespace basal::cli {
namespace {

bool Hidden(const std::string& group) { return group.empty(); }

// CLI11 appends each check's description to the type name: "TEXT:{normal,full}" for
// CLI::IsMember, "UINT:INT in [1 - 4096]" for CLI::Range. The first part is the type name the
// command gave; a "{...}" part is the set of choices.
void SplitTypeName(const std::string& full, std::string& type_name, std::vector<std::string>& choices) {
  const size_t colon = full.find(':');
  type_name = full.substr(0, colon);
  if (colon == std::string::npos) return;
  std::string rest = full.substr(colon + 1);
  size_t at = 0;
  while (at <= rest.size()) {
    const size_t next = std::min(rest.find(':', at), rest.size());
    const std::string part = rest.substr(at, next - at);
    if (part.size() >= 2 && part.front() == '{' && part.back() == '}') {
      std::string item;
      for (char c : part.substr(1, part.size() - 2) + ",") {
        if (c == ',') {
          if (!item.empty()) choices.push_back(item);
          item.clear();
        } else {
          item += c;
        }
      }
    }
    at = next + 1;
  }
}

// The words of the type name: "NAME|FLOW.js" -> NAME, FLOW.js; "COMMAND [SUBCOMMAND]" -> COMMAND,
// SUBCOMMAND.
std::vector<std::string> TypeWords(const std::string& type_name) {
  std::vector<std::string> words;
  std::string word;
  for (char c : type_name + " ") {
    if (c == '|' || c == ' ' || c == '[' || c == ']') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  return words;
}

bool HasName(const ArgumentDoc& a, std::string_view name) {
  return std::find(a.names.begin(), a.names.end(), name) != a.names.end();
}

// What a NAME positional names, by the command it belongs to: the innermost command of the path
// found here. A new command whose NAME is one of these things gets its names completed by adding
// its word here; without it, its NAME is completed with nothing (never with something wrong).
constexpr std::pair<std::string_view, ValueKind> kNameOfCommand[] = {
    {"run", ValueKind::kFlow},        // basal run NAME|FLOW.js
    {"flow", ValueKind::kFlow},       // basal flow approve|show|diff|revoke NAME
    {"policy", ValueKind::kPolicy},   // basal policy approve|show|diff|revoke NAME
    {"secret", ValueKind::kSecret},   // basal secret set|rm NAME
    {"token", ValueKind::kToken},     // basal token revoke NAME
};

// What the words of `a` (an argument of the command at `path`) are. The definitions say it with
// their type names: FILE, FILE.jsonl, FLOW.js, PATH (a path), DIR, COMMAND (basal help's), NAME
// (see kNameOfCommand; as an option's value: --policy NAME, --worker-user NAME), and with the
// choices of a CLI::IsMember check. Anything else (JSON, TEXT, N, ID, URL, SCOPE) is not completed.
std::vector<ValueKind> ValueKindsOf(const std::vector<std::string>& path, const ArgumentDoc& a) {
  if (!a.choices.empty()) return {ValueKind::kChoice};
  std::vector<ValueKind> kinds;
  auto add = [&kinds](ValueKind k) {
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  };
  if (!a.takes_value) return kinds;
  for (const std::string& word : TypeWords(a.type_name)) {
    if (word == "FILE" || word.starts_with("FILE.") || word == "PATH" || word.ends_with(".js") ||
        word.ends_with(".json")) {
      add(ValueKind::kFile);
    } else if (word == "DIR") {
      add(ValueKind::kDirectory);
    } else if (word == "COMMAND") {
      add(ValueKind::kCommand);
    } else if (word == "NAME" && !a.positional.empty()) {
      for (auto it = path.rbegin(); it != path.rend(); ++it) {
        auto known = std::find_if(std::begin(kNameOfCommand), std::end(kNameOfCommand),
                                  [&](const auto& entry) { return entry.first == *it; });
        if (known != std::end(kNameOfCommand)) {
          add(known->second);
          break;
        }
      }
    } else if (word == "NAME" && HasName(a, "--flow")) {
      add(ValueKind::kFlow);
    } else if (word == "NAME" && HasName(a, "--policy")) {
      add(ValueKind::kPolicy);
    } else if (word == "NAME" && HasName(a, "--worker-user")) {
      add(ValueKind::kUser);
    }
  }
  return kinds;
}

ArgumentDoc DescribeArgument(const std::vector<std::string>& path, const CLI::Option& o) {
  ArgumentDoc a;
  for (const std::string& s : o.get_snames()) a.names.push_back("-" + s);
  for (const std::string& l : o.get_lnames()) a.names.push_back("--" + l);
  if (o.get_positional() && !o.nonpositional()) a.positional = o.get_name(true, false);
  SplitTypeName(o.get_type_name(), a.type_name, a.choices);
  a.description = o.get_description();
  // A flag expects no word (CLI11 gives it expected(0)); an option or a positional one or more.
  a.takes_value = o.get_items_expected_max() > 0;
  a.required = o.get_required();
  a.repeatable = o.get_items_expected_max() > 1;
  a.kinds = ValueKindsOf(path, a);
  return a;
}

CommandDoc Describe(const CLI::App& app, std::vector<std::string> path) {
  CommandDoc c;
  c.path = path;
  c.description = app.get_description();
  c.footer = app.get_footer();
  c.needs_subcommand = app.get_require_subcommand_min() > 0;
  for (const CLI::Option* o : app.get_options()) {
    if (Hidden(o->get_group())) continue;
    ArgumentDoc a = DescribeArgument(path, *o);
    (a.positional.empty() ? c.options : c.positionals).push_back(std::move(a));
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (Hidden(sub->get_group())) continue;
    std::vector<std::string> sub_path = path;
    sub_path.push_back(sub->get_name());
    c.subcommands.push_back(Describe(*sub, std::move(sub_path)));
  }
  return c;
}

}  // namespace

std::string CommandDoc::Name() const {
  std::string name = "basal";
  for (const std::string& p : path) name += " " + p;
  return name;
}

const CommandDoc* CommandDoc::Subcommand(std::string_view name) const {
  for (const CommandDoc& s : subcommands)
    if (s.path.back() == name) return &s;
  return nullptr;
}

const ArgumentDoc* CommandDoc::Option(std::string_view name) const {
  for (const ArgumentDoc& o : options)
    if (HasName(o, name)) return &o;
  return nullptr;
}

CommandDoc DescribeCommand(const CLI::App& app) { return Describe(app, {}); }

}  // namespace basal::cli
