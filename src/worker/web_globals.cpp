#include "worker/web_globals.h"

#include <cstdint>
#include <cstdlib>
#include <new>

#include "worker/web_natives.h"

namespace basal::worker {
namespace {

// ---- the lazy accessors ------------------------------------------------------------------------

// The table the accessors were made from, and which of its groups is being installed (a getter read
// again while its installer runs would recurse without end). A worker has one context, so one
// table; the accessors name their global by position in it (`magic`), which costs no JavaScript
// object beyond one function per name (docs/runtime.md: the idle worker's memory).
std::span<const LazyGlobal> g_groups;
uint64_t g_installing = 0;  // bit i: group i
constexpr int kMaxNamesPerGroup = 64;
constexpr size_t kMaxGroups = 64;

const char* NameOf(int magic) {
  return g_groups[static_cast<size_t>(magic / kMaxNamesPerGroup)].names[static_cast<size_t>(magic % kMaxNamesPerGroup)];
}

// An assignment before the first read replaces the global with the value, loading nothing.
JSValue LazySet(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv, int magic) {
  JSValue global = JS_GetGlobalObject(ctx);
  const int r = JS_DefinePropertyValueStr(ctx, global, NameOf(magic), JS_DupValue(ctx, argc > 0 ? argv[0] : JS_UNDEFINED),
                                          kWebGlobalFlags);
  JS_FreeValue(ctx, global);
  return r < 0 ? JS_EXCEPTION : JS_UNDEFINED;
}

JSValue LazyGet(JSContext* ctx, JSValueConst, int, JSValueConst*, int magic) {
  const size_t index = static_cast<size_t>(magic / kMaxNamesPerGroup);
  const LazyGlobal& group = g_groups[index];
  const char* name = NameOf(magic);
  if (g_installing & (uint64_t{1} << index))
    return JS_ThrowInternalError(ctx, "%s was read while it was being loaded", name);
  JSValue global = JS_GetGlobalObject(ctx);
  // A getter a script kept and calls after the name was loaded, replaced or deleted loads nothing
  // again: it reads what the global holds now.
  {
    JSAtom atom = JS_NewAtom(ctx, name);
    if (atom == JS_ATOM_NULL) {
      JS_FreeValue(ctx, global);
      return JS_EXCEPTION;
    }
    JSPropertyDescriptor desc;
    const int found = JS_GetOwnProperty(ctx, &desc, global, atom);
    JS_FreeAtom(ctx, atom);
    if (found < 0) {
      JS_FreeValue(ctx, global);
      return JS_EXCEPTION;
    }
    if (found == 1) {
      JS_FreeValue(ctx, desc.getter);
      JS_FreeValue(ctx, desc.setter);
      if (!(desc.flags & JS_PROP_GETSET)) {
        JS_FreeValue(ctx, global);
        return desc.value;
      }
      JS_FreeValue(ctx, desc.value);
    } else {
      JS_FreeValue(ctx, global);
      return JS_UNDEFINED;
    }
  }
  std::string error;
  bool ok = false;
  g_installing |= uint64_t{1} << index;
  try {
    ok = group.install(ctx, global, error);
  } catch (const std::bad_alloc&) {
    error = "the worker's address-space limit refused an allocation";
  }
  g_installing &= ~(uint64_t{1} << index);
  JSValue result = JS_EXCEPTION;
  if (!ok) {
    if (!error.empty()) JS_ThrowInternalError(ctx, "the global %s could not be loaded: %s", name, error.c_str());
  } else {
    // The installer must have replaced this accessor, or reading the name would come back here.
    JSAtom atom = JS_NewAtom(ctx, name);
    JSPropertyDescriptor desc;
    const int found = atom == JS_ATOM_NULL ? -1 : JS_GetOwnProperty(ctx, &desc, global, atom);
    if (found == 1) {
      JS_FreeValue(ctx, desc.value);
      JS_FreeValue(ctx, desc.getter);
      JS_FreeValue(ctx, desc.setter);
      if (desc.flags & JS_PROP_GETSET)
        JS_ThrowInternalError(ctx, "the installer of %s did not define it", name);
      else
        result = JS_GetProperty(ctx, global, atom);
    } else if (found == 0) {
      JS_ThrowInternalError(ctx, "the installer of %s did not define it", name);
    }
    if (atom != JS_ATOM_NULL) JS_FreeAtom(ctx, atom);
  }
  JS_FreeValue(ctx, global);
  return result;
}

// One function is both the getter and the setter of a name (a getter is called with no argument,
// a setter with one): half the JavaScript objects every worker keeps for the accessors.
JSValue LazyAccess(JSContext* ctx, JSValueConst this_value, int argc, JSValueConst* argv, int magic) {
  return argc > 0 ? LazySet(ctx, this_value, argc, argv, magic) : LazyGet(ctx, this_value, argc, argv, magic);
}



}  // namespace

bool InstallLazyGlobals(JSContext* ctx, std::span<const LazyGlobal> groups) {
  if (groups.size() > kMaxGroups) std::abort();  // a table of ours: a bug, not an input
  g_groups = groups;
  g_installing = 0;
  JSValue global = JS_GetGlobalObject(ctx);
  bool ok = true;
  for (size_t g = 0; ok && g < groups.size(); ++g) {
    if (groups[g].names.size() > kMaxNamesPerGroup) std::abort();
    for (size_t n = 0; ok && n < groups[g].names.size(); ++n) {
      const char* name = groups[g].names[n];
      const int magic = static_cast<int>(g * kMaxNamesPerGroup + n);
      JSValue access = JS_NewCFunctionMagic(ctx, LazyAccess, name, 0, JS_CFUNC_generic_magic, magic);
      JSAtom atom = JS_NewAtom(ctx, name);
      if (JS_IsException(access) || atom == JS_ATOM_NULL) {
        JS_FreeValue(ctx, access);
        ok = false;
      } else {  // takes both references
        ok = JS_DefinePropertyGetSet(ctx, global, atom, access, JS_DupValue(ctx, access), JS_PROP_CONFIGURABLE) >= 0;
      }
      if (atom != JS_ATOM_NULL) JS_FreeAtom(ctx, atom);
    }
  }
  JS_FreeValue(ctx, global);
  return ok;
}


}  // namespace basal::worker
