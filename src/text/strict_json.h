// Strict reading of JSON that an operator wrote and reviewed (a flow's manifest, basal serve's
// config): nlohmann's parser keeps the last of two equal keys, so a second "grants" or "limits"
// would silently replace the first one somebody reviewed; and it nests as deep as the text does,
// while printing and checking a value recurse. StrictJsonWatch watches nlohmann's parse callback
// for both and keeps the first problem with where it was; each caller words the message its own
// way (its own name for the top level and its own path syntax).
//
//   StrictJsonWatch watch(64);
//   Json root = Json::parse(text.begin(), text.end(),
//                           [&watch](int, Json::parse_event_t e, Json& v) { return watch.OnEvent(e, v); },
//                           /*allow_exceptions=*/false);
//   if (watch.problem() != StrictJsonWatch::Problem::kNone) ... watch.where() ...
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace basal {

class StrictJsonWatch {
 public:
  enum class Problem { kNone, kDuplicateKey, kTooDeep };

  // One open container on the way to the problem: an array (and the index of the element it
  // reads) or an object (and the key whose value it reads).
  struct Step {
    bool is_array = false;
    std::string key;
    size_t index = 0;
  };

  explicit StrictJsonWatch(size_t max_depth) : max_depth_(max_depth) {}

  // The parse callback's body; always true (nothing is dropped: a problem is reported after).
  bool OnEvent(nlohmann::json::parse_event_t event, const nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (frames_.size() >= max_depth_) Note(Problem::kTooDeep);
        frames_.push_back(Frame{event == Event::array_start, {}, {}, 0});
        break;
      case Event::object_end:
      case Event::array_end:
        if (!frames_.empty()) frames_.pop_back();
        Advance();
        break;
      case Event::key:
        if (!frames_.empty() && parsed.is_string()) {
          Frame& top = frames_.back();
          top.key = parsed.get<std::string>();
          if (!top.keys.insert(top.key).second) Note(Problem::kDuplicateKey);
        }
        break;
      case Event::value:
        Advance();
        break;
    }
    return true;
  }

  Problem problem() const { return problem_; }
  // The containers open when the problem was seen, outermost first. A duplicate key: the last
  // step is the object that has it twice, its `key` the duplicated key. Too deep: every container
  // around the one that would have opened.
  const std::vector<Step>& where() const { return where_; }
  size_t max_depth() const { return max_depth_; }

 private:
  struct Frame {
    bool is_array;
    std::set<std::string> keys;
    std::string key;  // objects: the key whose value comes next
    size_t index;     // arrays: the index of the next element
  };

  void Note(Problem p) {
    if (problem_ != Problem::kNone) return;  // the first one is reported
    problem_ = p;
    for (const Frame& f : frames_) where_.push_back(Step{f.is_array, f.key, f.index});
  }
  void Advance() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
  }

  size_t max_depth_;
  std::vector<Frame> frames_;
  Problem problem_ = Problem::kNone;
  std::vector<Step> where_;
};

}  // namespace basal
