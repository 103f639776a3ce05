// ManPages: basal(1) and one page per command, written from CommandDoc, so each page says what
// `basal COMMAND --help` says (the same descriptions, options and footer), laid out as a man page.
// The manifest's page, basal-manifest(5), comes from docs/manifest.md
// (packaging/man/markdown_to_man.py), since it describes a file, not a command.
#include <cstdint>
#include <cstdio>
#include <string>

#include "cli/reference.h"

namespace basal::cli {
namespace {

// The next code point of UTF-8 `text` at `i` (advanced past it); a byte that starts no valid
// sequence is taken as U+FFFD.
uint32_t NextCodePoint(std::string_view text, size_t& i) {
  const auto byte = [&](size_t at) { return static_cast<unsigned char>(text[at]); };
  const unsigned char b = byte(i);
  int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
  uint32_t cp = extra == 3 ? (b & 0x07u) : extra == 2 ? (b & 0x0Fu) : extra == 1 ? (b & 0x1Fu) : b;
  if (b >= 0x80 && extra == 0) {
    ++i;
    return 0xFFFD;
  }
  size_t j = i + 1;
  for (; extra > 0; --extra, ++j) {
    if (j >= text.size() || (byte(j) & 0xC0) != 0x80) {
      i = j;
      return 0xFFFD;
    }
    cp = (cp << 6) | (byte(j) & 0x3Fu);
  }
  i = j;
  return cp;
}

// Bold and italic runs of text that RoffText escapes.
std::string Bold(std::string_view text) { return "\\fB" + RoffText(text) + "\\fR"; }
std::string Italic(std::string_view text) { return "\\fI" + RoffText(text) + "\\fR"; }

std::string PageName(const CommandDoc& c) {
  std::string name = "basal";
  if (!c.path.empty()) name += "-" + c.path.front();
  return name;
}

std::string Upper(std::string s) {
  for (char& ch : s)
    if (ch >= 'a' && ch <= 'z') ch = static_cast<char>(ch - 'a' + 'A');
  return s;
}

// An argument as a synopsis shows it: `--manifest FILE`, `NAME|FLOW.js`, `[A [B]]`.
std::string ArgumentSynopsis(const ArgumentDoc& a) {
  std::string type = a.choices.empty() ? a.type_name : "";
  for (const std::string& choice : a.choices) type += (type.empty() ? "" : "|") + choice;
  // "A [B]" already says how many words it takes; "NAME" that repeats gets "...".
  const bool shaped = type.find_first_of(" [") != std::string::npos;
  if (!a.positional.empty())
    return Italic(type.empty() ? Upper(a.positional) : type) + (a.repeatable && !shaped ? "..." : "");
  std::string s = Bold(a.names.back());
  if (a.takes_value) s += " " + Italic(type.empty() ? "VALUE" : type);
  return s;
}

std::string Synopsis(const CommandDoc& c) {
  std::string s = ".B " + RoffText(c.Name()) + "\n";
  std::string rest;
  bool optional = false;
  for (const ArgumentDoc& o : c.options) {
    if (o.required) {
      rest += ArgumentSynopsis(o) + " ";
    } else {
      optional = true;
    }
  }
  if (optional) rest = "[\\fIOPTIONS\\fR] " + rest;
  for (const ArgumentDoc& p : c.positionals)
    rest += p.required ? ArgumentSynopsis(p) + " " : "[" + ArgumentSynopsis(p) + "] ";
  if (c.needs_subcommand) rest += "\\fICOMMAND\\fR ";
  if (!rest.empty()) {
    rest.pop_back();
    s += rest + "\n";
  }
  return s;
}

// One tagged paragraph an argument: its names and value, then its help text.
std::string ArgumentList(const std::vector<ArgumentDoc>& args) {
  std::string out;
  for (const ArgumentDoc& a : args) {
    out += ".TP\n";
    if (a.positional.empty()) {
      std::string names;
      for (const std::string& n : a.names) names += (names.empty() ? "" : ", ") + Bold(n);
      std::string type = a.type_name;
      if (!a.choices.empty()) {
        type.clear();
        for (const std::string& choice : a.choices) type += (type.empty() ? "" : "|") + choice;
      }
      out += names + (a.takes_value ? " " + Italic(type.empty() ? "VALUE" : type) : "") + "\n";
    } else {
      out += ArgumentSynopsis(a) + "\n";
    }
    std::string text = a.description;
    if (a.required) text += " (required)";
    if (a.repeatable && a.positional.empty()) text += " (may be given more than once)";
    out += RoffText(text) + "\n";
  }
  return out;
}

// A command's footer, as --help prints it, laid out for man: lines of prose are joined into
// filled paragraphs; indented lines (commands, JSON) stay as they are; the examples, from the
// line starting "Examples" on, are returned apart for the EXAMPLES section.
struct Footer {
  std::string prose;     // roff
  std::string examples;  // roff
};

Footer LayOutFooter(const std::string& footer) {
  Footer out;
  std::string* into = &out.prose;
  std::string paragraph;
  bool literal = false;
  auto end_paragraph = [&] {
    if (!paragraph.empty()) *into += ".PP\n" + RoffText(paragraph) + "\n";
    paragraph.clear();
  };
  auto end_literal = [&] {
    if (literal) *into += ".fi\n.RE\n";
    literal = false;
  };
  size_t at = 0;
  while (at <= footer.size()) {
    size_t end = footer.find('\n', at);
    if (end == std::string::npos) end = footer.size();
    const std::string line = footer.substr(at, end - at);
    at = end + 1;
    if (line.starts_with("Examples")) {
      end_paragraph();
      end_literal();
      into = &out.examples;
      // "Examples (from the repository's root):" says where they run.
      const size_t open = line.find('('), close = line.rfind(')');
      if (open != std::string::npos && close != std::string::npos && close > open + 1) {
        std::string where = line.substr(open + 1, close - open - 1);
        where[0] = static_cast<char>(where[0] >= 'a' && where[0] <= 'z' ? where[0] - 'a' + 'A' : where[0]);
        *into += ".PP\n" + RoffText(where + ":") + "\n";
      }
      continue;
    }
    if (line.empty()) {
      end_paragraph();
      end_literal();
    } else if (line.starts_with("  ")) {
      end_paragraph();
      if (!literal) *into += ".RS 4\n.nf\n";
      literal = true;
      *into += RoffText(line.substr(2)) + "\n";
    } else {
      end_literal();
      paragraph += (paragraph.empty() ? "" : " ") + line;
    }
  }
  end_paragraph();
  end_literal();
  return out;
}

std::string Header(const std::string& name, int section, const std::string& version) {
  // Left-adjusted and never hyphenated: options and paths must read as they are typed.
  return ".TH \"" + Upper(RoffText(name)) + "\" \"" + std::to_string(section) + "\" \"\" \"basal " +
         RoffText(version) + "\" \"basal manual\"\n.ad l\n.nh\n";
}

// A subcommand's part of its command's page: `basal flow approve` under basal-flow(1).
std::string SubcommandSection(const CommandDoc& c, std::string& examples) {
  std::string out = ".SS \"" + RoffText(c.Name()) + "\"\n" + Synopsis(c) + ".PP\n" + RoffText(c.description) + "\n";
  const Footer f = LayOutFooter(c.footer);
  out += f.prose;
  if (!c.positionals.empty() || !c.options.empty()) out += ArgumentList(c.positionals) + ArgumentList(c.options);
  examples += f.examples;
  for (const CommandDoc& sub : c.subcommands) out += SubcommandSection(sub, examples);
  return out;
}

std::string CommandPage(const CommandDoc& c, const CommandDoc& basal, const std::string& version) {
  const std::string name = PageName(c);
  std::string out = Header(name, 1, version);
  out += ".\\\" Generated by `basal __generate man` from basal's command definitions: do not edit.\n";
  out += ".SH NAME\n" + RoffText(name) + " \\- " + RoffText(c.description) + "\n";
  out += ".SH SYNOPSIS\n" + Synopsis(c);
  for (const CommandDoc& sub : c.subcommands) out += ".br\n" + Synopsis(sub);
  if (c.path.empty()) out += ".br\n.B basal \\-\\-version\n";
  const Footer f = LayOutFooter(c.footer);
  out += ".SH DESCRIPTION\n" + RoffText(c.description) + "\n" + f.prose;
  if (!c.positionals.empty()) out += ".SH ARGUMENTS\n" + ArgumentList(c.positionals);
  if (!c.options.empty()) out += ".SH OPTIONS\n" + ArgumentList(c.options);
  std::string examples = f.examples;
  if (c.path.empty()) {
    out += ".SH COMMANDS\nEach command has a page of its own:\n";
    for (const CommandDoc& sub : c.subcommands)
      out += ".TP\n.BR " + RoffText(PageName(sub)) + " (1)\n" + RoffText(sub.description) + "\n";
  } else if (!c.subcommands.empty()) {
    out += ".SH COMMANDS\n";
    for (const CommandDoc& sub : c.subcommands) out += SubcommandSection(sub, examples);
  }
  if (!examples.empty()) out += ".SH EXAMPLES\n" + examples;
  out += ".SH SEE ALSO\n";
  std::string see;
  if (!c.path.empty()) see += ".BR basal (1),\n";
  for (const CommandDoc& other : basal.subcommands)
    if (&other != &c) see += ".BR " + RoffText(PageName(other)) + " (1),\n";
  see += ".BR basal\\-manifest (5)\n";
  out += see;
  // The pages are made once for every prefix (cmake/reference.cmake), so they name both.
  out += ".PP\n" +
         RoffText("The guides, README.md and docs/*.md, and examples/: /usr/share/doc/basal from the Debian package, "
                  "PREFIX/share/doc/basal from `cmake --install`.") +
         "\n";
  return out;
}

}  // namespace

std::string RoffText(std::string_view text) {
  std::string out;
  bool line_start = true;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (line_start && c == '.') out += "\\&";
    line_start = false;
    if (static_cast<unsigned char>(c) >= 0x80) {
      const uint32_t cp = NextCodePoint(text, i);
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\[u%04X]", static_cast<unsigned>(cp));
      out += buf;
      continue;
    }
    ++i;
    switch (c) {
      case '\\': out += "\\e"; break;
      case '-': out += "\\-"; break;     // a minus, as in --db: typed as it reads (an ASCII '-')
      case '\'': out += "\\(aq"; break;  // an ASCII quote, not a typographic one
      case '`': out += "\\(ga"; break;
      case '\t': out += ' '; break;
      case '\n':
        out += '\n';
        line_start = true;
        break;
      default:
        out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
  }
  return out;
}

std::vector<ManPage> ManPages(const CommandDoc& basal, const std::string& version) {
  std::vector<ManPage> pages;
  pages.push_back({"basal.1", CommandPage(basal, basal, version)});
  for (const CommandDoc& c : basal.subcommands) pages.push_back({PageName(c) + ".1", CommandPage(c, basal, version)});
  return pages;
}

}  // namespace basal::cli
