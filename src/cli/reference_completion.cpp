// Complete: the candidates for the word under the cursor, read from the command definitions
// (CommandDoc) and, for names, from a NameSource; and the small shell scripts that ask for them
// (`basal __complete -- WORD...`). All the knowledge is here, in one walk over the definitions;
// the scripts only translate between a shell and this.
#include <algorithm>
#include <set>
#include <string>

#include "cli/reference.h"

namespace basal::cli {
namespace {

// One line, short: what zsh and fish show beside a candidate. The first sentence of the help text.
std::string ShortDescription(const std::string& text) {
  std::string d;
  int depth = 0;  // a sentence does not end inside parentheses: "(survives a crash; default)"
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    depth += c == '(' ? 1 : c == ')' && depth > 0 ? -1 : 0;
    if (depth == 0 && (c == '.' || c == ';') && (i + 1 == text.size() || text[i + 1] == ' ')) break;
    d += c;
  }
  std::replace_if(d.begin(), d.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, ' ');
  constexpr size_t kMax = 72;
  if (d.size() > kMax) {
    d.resize(kMax - 3);
    while (!d.empty() && (static_cast<unsigned char>(d.back()) & 0xC0) == 0x80) d.pop_back();  // whole UTF-8
    if (!d.empty()) d.pop_back();
    d += "...";
  }
  return d;
}

// Names come from the store, which holds what operators typed: only a name a shell can take as
// one plain word is offered (flow and policy names are such words already: [A-Za-z0-9._-]).
bool PlainWord(const std::string& name) {
  if (name.empty() || name[0] == '-' || name[0] == ':') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-' || c == '@' || c == '+';
  });
}

class Walk {
 public:
  Walk(const CommandDoc& basal, NameSource& names) : basal_(basal), names_(names), command_(&basal) {}

  Completion Run(const std::vector<std::string>& words) {
    for (size_t i = 0; i + 1 < words.size(); ++i) Take(words[i]);
    const std::string current = words.empty() ? std::string() : words.back();
    Completion out;
    if (pending_ != nullptr) {
      Values(*pending_, current, out);
    } else if (!only_positionals_ && current.size() > 1 && current[0] == '-' &&
               current.find('=') != std::string::npos) {
      const size_t eq = current.find('=');
      if (const ArgumentDoc* o = command_->Option(current.substr(0, eq)); o != nullptr && o->takes_value)
        Values(*o, current.substr(eq + 1), out);
    } else if (!only_positionals_ && !current.empty() && current[0] == '-') {
      Options(current, out);
    } else {
      if (positionals_.empty()) {
        for (const CommandDoc& sub : command_->subcommands)
          Offer(out, sub.path.back(), sub.description, current);
      }
      if (const ArgumentDoc* a = Positional(positionals_.size()); a != nullptr) Values(*a, current, out);
    }
    return out;
  }

 private:
  // A word before the cursor: an option (and its value), a subcommand, or a positional.
  void Take(const std::string& w) {
    if (pending_ != nullptr) {
      Remember(*pending_, w);
      pending_ = nullptr;
      return;
    }
    if (!only_positionals_ && w == "--") {
      only_positionals_ = true;
      return;
    }
    if (!only_positionals_ && w.size() > 1 && w[0] == '-') {
      const size_t eq = w.find('=');
      const ArgumentDoc* o = command_->Option(w.substr(0, eq));
      if (o == nullptr) return;
      given_.insert(o);
      if (!o->takes_value) return;
      if (eq == std::string::npos) {
        pending_ = o;
      } else {
        Remember(*o, w.substr(eq + 1));
      }
      return;
    }
    if (positionals_.empty() && !only_positionals_) {
      if (const CommandDoc* sub = command_->Subcommand(w); sub != nullptr) {
        command_ = sub;
        given_.clear();
        return;
      }
    }
    positionals_.push_back(w);
  }

  // The values that say where the names are: --db and --secrets, wherever they were typed.
  void Remember(const ArgumentDoc& o, const std::string& value) {
    if (std::find(o.names.begin(), o.names.end(), "--db") != o.names.end()) db_ = value;
    if (std::find(o.names.begin(), o.names.end(), "--secrets") != o.names.end()) secrets_ = value;
  }

  // The positional argument that the word at `index` (among this command's positional words) fills.
  const ArgumentDoc* Positional(size_t index) const {
    for (const ArgumentDoc& a : command_->positionals) {
      if (a.repeatable || index == 0) return &a;
      --index;
    }
    return nullptr;
  }

  void Options(const std::string& current, Completion& out) const {
    for (const ArgumentDoc& o : command_->options) {
      if (given_.contains(&o) && !o.repeatable) continue;
      for (const std::string& name : o.names) Offer(out, name, o.description, current);
    }
  }

  void Values(const ArgumentDoc& a, const std::string& current, Completion& out) {
    for (ValueKind kind : a.kinds) {
      switch (kind) {
        case ValueKind::kFile:
          out.files = true;
          break;
        case ValueKind::kDirectory:
          out.directories = true;
          break;
        case ValueKind::kUser:
          out.users = true;
          break;
        case ValueKind::kChoice:
          for (const std::string& choice : a.choices) Offer(out, choice, "", current);
          break;
        case ValueKind::kCommand: {
          // `basal help flow <TAB>`: the commands under the words before this one.
          const CommandDoc* at = &basal_;
          for (const std::string& w : positionals_) at = at != nullptr ? at->Subcommand(w) : nullptr;
          if (at != nullptr)
            for (const CommandDoc& sub : at->subcommands) Offer(out, sub.path.back(), sub.description, current);
          break;
        }
        case ValueKind::kFlow:
        case ValueKind::kPolicy:
        case ValueKind::kSecret:
        case ValueKind::kToken:
          for (const std::string& name : names_.Names(kind, db_, secrets_))
            if (PlainWord(name)) Offer(out, name, "", current);
          break;
      }
    }
  }

  static void Offer(Completion& out, const std::string& word, const std::string& description,
                    const std::string& current) {
    if (!word.starts_with(current)) return;
    for (const Candidate& c : out.words)
      if (c.word == word) return;
    out.words.push_back({word, ShortDescription(description)});
  }

  const CommandDoc& basal_;
  NameSource& names_;
  const CommandDoc* command_;
  const ArgumentDoc* pending_ = nullptr;  // an option whose value is the next word
  std::set<const ArgumentDoc*> given_;    // options of command_ already on the line
  std::vector<std::string> positionals_;  // command_'s positional words so far
  bool only_positionals_ = false;         // after "--"
  std::string db_;
  std::string secrets_;
};

// The scripts. Each passes the words after `basal` up to the cursor, the last one the word being
// completed, and turns the answer's lines into the shell's candidates.
constexpr const char* kBash = R"(# bash completion for basal. Generated by `basal __generate bash`: do not edit.
# The candidates come from the basal being completed (`basal __complete -- WORD...`), which reads
# its own command definitions and, for the names of flows, policies, secrets and tokens, its store
# (read only; a --db typed on the line is honoured).
_basal() {
  local i w joined=0 value line basal=${COMP_WORDS[0]/#\~/$HOME}
  local -a words=()
  COMPREPLY=()
  for ((i = 1; i <= COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    # bash splits --db=FILE into --db, = and FILE (COMP_WORDBREAKS): basal gets --db=FILE back.
    if [[ $w == = && ${#words[@]} -gt 0 && ${words[-1]} == -* && ${words[-1]} != *=* ]]; then
      words[-1]+==
      joined=1
      continue
    fi
    if ((joined)); then
      words[-1]+=$w
      joined=0
      continue
    fi
    words+=("$w")
  done
  # What the shell replaces: the word under the cursor, after any '='.
  value=${COMP_WORDS[COMP_CWORD]}
  [[ $value == = ]] && value=
  [[ $value == -*=* ]] && value=${value#*=}
  while IFS= read -r line; do
    case $line in
      :files)
        compopt -o filenames 2>/dev/null
        while IFS= read -r w; do COMPREPLY+=("$w"); done < <(compgen -f -- "$value")
        ;;
      :dirs)
        compopt -o filenames 2>/dev/null
        while IFS= read -r w; do COMPREPLY+=("$w"); done < <(compgen -d -- "$value")
        ;;
      :users)
        while IFS= read -r w; do COMPREPLY+=("$w"); done < <(compgen -u -- "$value")
        ;;
      *) COMPREPLY+=("${line%%$'\t'*}") ;;
    esac
  done < <("$basal" __complete -- "${words[@]}" 2>/dev/null)
}
complete -F _basal basal
)";

constexpr const char* kZsh = R"(#compdef basal
# zsh completion for basal. Generated by `basal __generate zsh`: do not edit.
# The candidates come from the basal being completed (`basal __complete -- WORD...`), which reads
# its own command definitions and, for the names of flows, policies, secrets and tokens, its store
# (read only; a --db typed on the line is honoured).
_basal() {
  local line basal=${~words[1]}
  local -a specs answer
  answer=("${(@f)$("$basal" __complete -- "${(@Q)words[2,CURRENT]}" 2>/dev/null)}")
  # Only the value after '=' is replaced in --db=FILE.
  [[ ${words[CURRENT]} == -*=* ]] && compset -P '*='
  for line in "${answer[@]}"; do
    case $line in
      :files) _files ;;
      :dirs) _files -/ ;;
      :users) _users ;;
      '') ;;
      *$'\t'*) specs+=("${${line%%$'\t'*}//:/\\:}:${line#*$'\t'}") ;;
      *) specs+=("${line//:/\\:}") ;;
    esac
  done
  (( ${#specs} )) && _describe -t basal 'basal' specs
  return 0
}
# Autoloaded from $fpath (vendor-completions), this file is _basal's body: complete now. Sourced:
# register the function.
if [[ $funcstack[1] == _basal ]]; then
  _basal "$@"
else
  compdef _basal basal
fi
)";

constexpr const char* kFish = R"(# fish completion for basal. Generated by `basal __generate fish`: do not edit.
# The candidates come from the basal being completed (`basal __complete -- WORD...`), which reads
# its own command definitions and, for the names of flows, policies, secrets and tokens, its store
# (read only; a --db typed on the line is honoured).
function __basal_complete
    set -l tokens (commandline -opc)
    set -l current (commandline -ct)
    # In --db=FILE only the value is completed; fish replaces the whole token, so the prefix is kept.
    set -l prefix ''
    set -l value "$current"
    if string match -qr -- '^-[^=]*=' "$current"
        set prefix (string replace -r -- '=.*' '=' "$current")
        set value (string replace -r -- '^[^=]*=' '' "$current")
    end
    for line in ($tokens[1] __complete -- $tokens[2..-1] "$current" 2>/dev/null)
        switch $line
            case ':files'
                for path in (__fish_complete_path "$value")
                    echo "$prefix$path"
                end
            case ':dirs'
                for path in (__fish_complete_directories "$value")
                    echo "$prefix$path"
                end
            case ':users'
                __fish_complete_users
            case '*'
                echo "$prefix$line"
        end
    end
end
complete -c basal -f -a '(__basal_complete)'
)";

}  // namespace

Completion Complete(const CommandDoc& basal, const std::vector<std::string>& words, NameSource& names) {
  return Walk(basal, names).Run(words);
}

std::string CompletionLines(const Completion& completion) {
  std::string out;
  for (const Candidate& c : completion.words) {
    out += c.word;
    if (!c.description.empty()) out += "\t" + c.description;
    out += "\n";
  }
  if (completion.files) out += ":files\n";
  if (completion.directories) out += ":dirs\n";
  if (completion.users) out += ":users\n";
  return out;
}

std::string CompletionScript(std::string_view shell) {
  if (shell == "bash") return kBash;
  if (shell == "zsh") return kZsh;
  if (shell == "fish") return kFish;
  return "";
}

}  // namespace basal::cli
