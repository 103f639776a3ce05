#include "confinement/macos/seatbelt_profile.h"

namespace basal::confinement::macos {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::vector<SbplForm> All(std::string& error) {
    std::vector<SbplForm> forms;
    for (;;) {
      SkipSpace();
      if (pos_ >= text_.size()) return forms;
      SbplForm f;
      if (!Form(f, 0, error)) return {};
      forms.push_back(std::move(f));
    }
  }

 private:
  static constexpr int kMaxDepth = 32;

  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ';') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        return;
      }
    }
  }

  bool Form(SbplForm& out, int depth, std::string& error) {
    if (depth > kMaxDepth) {
      error = "forms nested deeper than " + std::to_string(kMaxDepth);
      return false;
    }
    const char c = text_[pos_];
    if (c == ')') {
      error = "unbalanced ')' at offset " + std::to_string(pos_);
      return false;
    }
    if (c == '(') {
      ++pos_;
      for (;;) {
        SkipSpace();
        if (pos_ >= text_.size()) {
          error = "unclosed '('";
          return false;
        }
        if (text_[pos_] == ')') {
          ++pos_;
          return true;
        }
        SbplForm child;
        if (!Form(child, depth + 1, error)) return false;
        out.list.push_back(std::move(child));
      }
    }
    if (c == '"') {
      const size_t end = text_.find('"', pos_ + 1);
      if (end == std::string_view::npos) {
        error = "unclosed string";
        return false;
      }
      out.atom = std::string(text_.substr(pos_, end + 1 - pos_));
      pos_ = end + 1;
      return true;
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != '(' && text_[pos_] != ')' && text_[pos_] != ';' && text_[pos_] != ' ' &&
           text_[pos_] != '\t' && text_[pos_] != '\n' && text_[pos_] != '\r')
      ++pos_;
    out.atom = std::string(text_.substr(start, pos_ - start));
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

std::string SbplForm::ToString() const {
  if (!is_list()) return atom;
  std::string s = "(";
  for (size_t i = 0; i < list.size(); ++i) s += (i ? " " : "") + list[i].ToString();
  return s + ")";
}

std::vector<SbplForm> ParseSbpl(std::string_view text, std::string& error) {
  error.clear();
  return Parser(text).All(error);
}

std::string CheckSeatbeltProfile(std::string_view text) {
  std::string error;
  const std::vector<SbplForm> forms = ParseSbpl(text, error);
  if (!error.empty()) return "worker.sb does not parse: " + error;
  // The design's list, in order: the version, the default, the one allowed operation.
  const char* const want[] = {"(version 1)", "(deny default)", "(allow signal (target self))"};
  constexpr size_t kWant = sizeof want / sizeof want[0];
  for (size_t i = 0; i < forms.size(); ++i) {
    const std::string f = forms[i].ToString();
    if (i >= kWant) return "rule " + f + " is not in the design's list (deny by default; allow only signals to itself)";
    if (f != want[i]) return "rule " + std::to_string(i + 1) + " is " + f + ", not " + want[i];
  }
  if (forms.size() < kWant) return std::string("worker.sb lacks ") + want[forms.size()];
  return "";
}

}  // namespace basal::confinement::macos
