// basal-js-bundle: a build-time host tool. Bundles CommonJS modules (npm packages fetched by
// cmake/js_packages.cmake, and our own files in src/worker/js/) into one script, compiles it with
// the same QuickJS the worker links, and writes the bytecode as a C++ byte array that the worker
// reads with JS_ReadObject (RunBundle, src/worker/web_natives.cpp). The worker never compiles these sources
// and never loads bytecode from anywhere but its own image.
//
//   basal-js-bundle --name web_url --entry whatwg-url --out-dir build/src/worker/js
//       --package whatwg-url=.../whatwg-url-14.2.0/package --package tr46=...
//       --module basal/web_core.js=src/worker/js/web_core.js
//
// The script evaluates to a function `(native) => exports of the entry module`. Inside, `require`
// resolves the way Node does for what these packages use: "./x" and "../x" relative to the module
// (trying x, x.js, x.json, x/index.js), a bare package name (or "name/") to its package.json
// "main", "name/path" inside a package, and "basal:native" to the object of native helpers the
// worker passes in. A module's factory is dropped once it ran, so QuickJS can free its top-level
// bytecode.
//
//   basal-js-bundle --name engine_start --script src/worker/js/engine_start.js --out-dir ...
//
// compiles one file as it is, as one global script (named "<basal>" in stacks), without the
// loader: the engine's own JavaScript that every worker runs at its start (Engine::Build). Its
// array is written into NAME_bytecode.h (no .cpp), for the one file that reads it: every worker
// reads it, so it belongs among that file's hot data, not isolated in 64 KiB blocks.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "quickjs.h"
}

namespace {

namespace fs = std::filesystem;

[[noreturn]] void Fail(const std::string& message) {
  std::cerr << "basal-js-bundle: " << message << "\n";
  std::exit(1);
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFileIfChanged(const fs::path& path, const std::string& text) {
  std::error_code ec;
  if (fs::exists(path, ec) && ReadFile(path) == text) return;  // keeps the object file up to date
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) Fail("cannot write " + path.string());
}

// A JSON string literal (also a JavaScript one) for a module id or path.
std::string Quote(const std::string& s) {
  std::string q = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      q += '\\';
      q += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      q += buf;
    } else {
      q += c;
    }
  }
  return q + "\"";
}

// package.json's "main" (index.js when absent), read with QuickJS's own JSON parser.
std::string PackageMain(JSContext* ctx, const fs::path& dir) {
  const std::string text = ReadFile(dir / "package.json");
  JSValue json = JS_ParseJSON(ctx, text.data(), text.size(), "package.json");
  if (JS_IsException(json)) Fail("invalid JSON in " + (dir / "package.json").string());
  JSValue main = JS_GetPropertyStr(ctx, json, "main");
  std::string result = "index.js";
  if (JS_IsString(main)) {
    const char* s = JS_ToCString(ctx, main);
    result = s;
    JS_FreeCString(ctx, s);
  }
  JS_FreeValue(ctx, main);
  JS_FreeValue(ctx, json);
  if (result.rfind("./", 0) == 0) result = result.substr(2);
  if (!result.ends_with(".js") && !result.ends_with(".json")) result += ".js";
  return result;
}

// The kernel's fault_around_bytes (64 KiB by default): see where the array is written.
constexpr size_t kIsolation = 64 * 1024;

// What `require(spec)` in module `from` names, as the bundle's require resolves it (kLoader):
// empty when it names nothing in `files`.
std::string Resolve(const std::map<std::string, fs::path>& files, const std::map<std::string, std::string>& mains,
                    const std::string& from, const std::string& spec) {
  std::string id;
  if (spec.rfind("./", 0) == 0 || spec.rfind("../", 0) == 0) {
    std::vector<std::string> parts;
    std::stringstream dir(from);
    for (std::string p; std::getline(dir, p, '/');) parts.push_back(p);
    if (!parts.empty()) parts.pop_back();
    std::stringstream rel(spec);
    for (std::string p; std::getline(rel, p, '/');) {
      if (p == "..") {
        if (!parts.empty()) parts.pop_back();
      } else if (p != "." && !p.empty()) {
        parts.push_back(p);
      }
    }
    for (size_t i = 0; i < parts.size(); ++i) id += (i ? "/" : "") + parts[i];
  } else {
    id = spec.ends_with("/") ? spec.substr(0, spec.size() - 1) : spec;
    if (auto it = mains.find(id); it != mains.end()) return it->second;
  }
  for (const std::string& candidate : {id, id + ".js", id + ".json", id + "/index.js"})
    if (files.count(candidate)) return candidate;
  return "";
}

// The string literals a module passes to require(): the packages bundled here require only by
// literal, so following them finds every module the entry can load (and leaves out the files a
// package ships for other systems, such as punycode's ES module copy).
std::vector<std::string> RequiredSpecs(const std::string& source) {
  std::vector<std::string> specs;
  for (size_t at = source.find("require("); at != std::string::npos; at = source.find("require(", at + 8)) {
    if (at > 0 && (std::isalnum(static_cast<unsigned char>(source[at - 1])) || source[at - 1] == '_' || source[at - 1] == '.'))
      continue;  // e.g. `myrequire(` or `x.require(`
    size_t i = at + 8;
    while (i < source.size() && std::isspace(static_cast<unsigned char>(source[i]))) ++i;
    if (i >= source.size() || (source[i] != '"' && source[i] != '\'')) continue;
    const char quote = source[i];
    const size_t end = source.find(quote, i + 1);
    if (end != std::string::npos) specs.push_back(source.substr(i + 1, end - i - 1));
  }
  return specs;
}

// The require of every bundle: see the file header.
constexpr const char* kLoader = R"JS(
return function (native) {
  const cache = Object.create(null);
  function resolve(from, spec) {
    if (spec === "basal:native") return spec;
    let id;
    if (spec.startsWith("./") || spec.startsWith("../")) {
      const parts = from.split("/");
      parts.pop();
      for (const p of spec.split("/")) {
        if (p === "..") parts.pop();
        else if (p !== "." && p !== "") parts.push(p);
      }
      id = parts.join("/");
    } else {
      id = spec.endsWith("/") ? spec.slice(0, -1) : spec;
      if (id in mains) return mains[id];
    }
    for (const candidate of [id, id + ".js", id + ".json", id + "/index.js"])
      if (candidate in defs) return candidate;
    throw new Error("module '" + spec + "' required by " + from + " is not in the bundle");
  }
  function load(id) {
    if (id === "basal:native") return native;
    const cached = cache[id];
    if (cached) return cached.exports;
    const module = { exports: {} };
    cache[id] = module;
    const factory = defs[id];
    defs[id] = null;
    factory.call(module.exports, module, module.exports, function require(spec) { return load(resolve(id, spec)); });
    return module.exports;
  }
  return load(resolve("", entry));
};
)JS";

}  // namespace

int main(int argc, char** argv) {
  std::string name, entry;
  fs::path out_dir, script_file;
  std::vector<std::pair<std::string, fs::path>> packages, modules;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Fail("option " + a + " needs a value");
    const std::string v = argv[++i];
    const size_t eq = v.find('=');
    if (a == "--name") {
      name = v;
    } else if (a == "--entry") {
      entry = v;
    } else if (a == "--out-dir") {
      out_dir = v;
    } else if (a == "--script") {
      script_file = v;
    } else if ((a == "--package" || a == "--module") && eq != std::string::npos && eq > 0) {
      (a == "--package" ? packages : modules).emplace_back(v.substr(0, eq), fs::path(v.substr(eq + 1)));
    } else {
      Fail("unknown option or malformed value: " + a + " " + v +
           " (expected --name N --entry ID --out-dir DIR [--package NAME=DIR]... [--module ID=FILE]..., or --name N "
           "--script FILE --out-dir DIR)");
    }
  }
  const bool plain = !script_file.empty();
  if (plain && (!entry.empty() || !packages.empty() || !modules.empty()))
    Fail("--script compiles one file as it is: no --entry, --package or --module with it");
  if (name.empty() || (entry.empty() && !plain) || out_dir.empty())
    Fail("--name, --out-dir and one of --entry and --script are required");

  JSRuntime* rt = JS_NewRuntime();
  JSContext* ctx = JS_NewContext(rt);
  if (!rt || !ctx) Fail("cannot create a QuickJS context");

  // id -> source; sorted, so the same inputs give the same bytes.
  std::map<std::string, fs::path> files;
  std::map<std::string, std::string> mains;
  for (const auto& [pkg, dir] : packages) {
    if (!fs::exists(dir / "package.json")) Fail("no package.json in " + dir.string());
    mains[pkg] = pkg + "/" + PackageMain(ctx, dir);
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".js" && ext != ".json")) continue;
      files[pkg + "/" + fs::relative(e.path(), dir).generic_string()] = e.path();
    }
  }
  for (const auto& [id, file] : modules) files[id] = file;
  for (const auto& [pkg, main] : mains)
    if (!files.count(main)) Fail("package " + pkg + ": its main " + main + " is not in the package");

  // Only what the entry reaches goes into the bundle.
  std::map<std::string, std::string> sources;
  std::vector<std::pair<std::string, std::string>> todo;  // (required by, spec)
  if (!plain) todo.emplace_back("", entry);
  while (!todo.empty()) {
    const auto [from, spec] = todo.back();
    todo.pop_back();
    if (spec == "basal:native") continue;
    const std::string id = Resolve(files, mains, from, spec);
    if (id.empty()) Fail("module '" + spec + "' required by " + (from.empty() ? "--entry" : from) + " is not among the inputs");
    if (sources.count(id)) continue;
    sources[id] = ReadFile(files[id]);
    if (id.ends_with(".js"))
      for (const std::string& s : RequiredSpecs(sources[id])) todo.emplace_back(id, s);
  }

  std::string script;
  if (plain) {
    script = ReadFile(script_file);
  } else {
    script = "(function () {\nconst entry = " + Quote(entry) + ";\nconst mains = {__proto__: null";
    for (const auto& [pkg, main] : mains) script += ",\n  " + Quote(pkg) + ": " + Quote(main);
    script += "};\nconst defs = {__proto__: null";
    for (const auto& [id, source] : sources) {
      const fs::path& file = files[id];
      script += ",\n" + Quote(id) + ": function (module, exports, require) {\n";
      if (id.ends_with(".json")) {
        // Parsed as JSON first: a .json module is data, never code.
        JSValue v = JS_ParseJSON(ctx, source.data(), source.size(), id.c_str());
        if (JS_IsException(v)) Fail("invalid JSON in " + file.string());
        JS_FreeValue(ctx, v);
        script += "module.exports = " + source + ";";
      } else {
        script += source;
      }
      script += "\n}";
    }
    script += "};\n";
    script += kLoader;
    script += "})()\n";
  }

  const std::string filename = plain ? std::string("<basal>") : "<basal:" + name + ">";
  JSValue fn = JS_Eval(ctx, script.data(), script.size(), filename.c_str(),
                       JS_EVAL_TYPE_GLOBAL | JS_EVAL_FLAG_COMPILE_ONLY);
  if (JS_IsException(fn)) {
    JSValue e = JS_GetException(ctx);
    const char* msg = JS_ToCString(ctx, e);
    JSValue stack = JS_GetPropertyStr(ctx, e, "stack");
    const char* st = JS_IsString(stack) ? JS_ToCString(ctx, stack) : nullptr;
    Fail("QuickJS cannot compile the " + name + " bundle: " + (msg ? msg : "?") + "\n" + (st ? st : ""));
  }
  size_t size = 0;
  uint8_t* bytes = JS_WriteObject(ctx, &size, fn, JS_WRITE_OBJ_BYTECODE);
  if (!bytes) Fail("JS_WriteObject failed for the " + name + " bundle");

  fs::create_directories(out_dir);
  const std::string symbol = "k" + name;
  std::string array;
  array.reserve(size * 4 + 100);
  for (size_t i = 0; i < size; ++i) {
    if (i % 24 == 0) array += "\n";
    array += std::to_string(bytes[i]);
    array += ',';
  }
  if (plain) {
    // A --script array is read by every worker at its start: defined in the header, it lies in
    // the read-only data of the one file that includes it (src/worker/engine.cpp), among the hot
    // data, not after the bundles' 64 KiB blocks (where it would make a block of its own resident).
    std::string h = "// Generated by basal-js-bundle from " + script_file.filename().string() +
                    ": do not edit. Include it in one file only.\n#pragma once\n#include <cstddef>\n\n"
                    "namespace basal::worker::bytecode {\nconst unsigned char " + symbol + "[" + std::to_string(size) +
                    "] = {" + array + "\n};\nconstexpr std::size_t " + symbol + "Size = " + std::to_string(size) +
                    ";\n}  // namespace basal::worker::bytecode\n";
    WriteFileIfChanged(out_dir / (name + "_bytecode.h"), h);
  } else {
    std::string h = "// Generated by basal-js-bundle from the " + name + " bundle: do not edit.\n#pragma once\n#include <cstddef>\n\n"
                    "namespace basal::worker::bytecode {\nextern const unsigned char " + symbol + "[];\nextern const std::size_t " +
                    symbol + "Size;\n}  // namespace basal::worker::bytecode\n";
    // Alone in whole 64 KiB blocks (aligned, padded with zeros): the kernel's fault-around maps
    // the cached pages of a 64 KiB block around each page a process touches, so bytecode sharing
    // a block with hot read-only data would count in every idle worker's resident set
    // (docs/performance.md).
    const std::string cpp = "// Generated by basal-js-bundle from the " + name + " bundle (entry " + entry +
                            "): do not edit.\n#include \"" + name + "_bytecode.h\"\n\nnamespace basal::worker::bytecode {\n" +
                            "alignas(" + std::to_string(kIsolation) + ") extern const unsigned char " + symbol + "[" +
                            std::to_string((size + kIsolation - 1) / kIsolation * kIsolation) + "] = {" + array +
                            "\n};\nextern const std::size_t " + symbol + "Size = " + std::to_string(size) +
                            ";\n}  // namespace basal::worker::bytecode\n";
    WriteFileIfChanged(out_dir / (name + "_bytecode.h"), h);
    WriteFileIfChanged(out_dir / (name + "_bytecode.cpp"), cpp);
  }
  js_free(ctx, bytes);
  JS_FreeValue(ctx, fn);
  JS_FreeContext(ctx);
  JS_FreeRuntime(rt);
  std::cout << "basal-js-bundle: " << name << ": " << (plain ? 1 : sources.size()) << " modules, " << script.size()
            << " bytes of source, " << size << " bytes of bytecode\n";
  return 0;
}
