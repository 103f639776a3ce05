// The engine's own JavaScript, made at every worker's start (Engine::Build, src/worker/engine.cpp).
// Compiled to QuickJS bytecode at build time by basal-js-bundle (--script: this file as it is, one
// global script, no bundling) and read back with JS_ReadObject from the worker's own image: no
// worker parses it. It runs before any script of a flow exists, so what it captures (Promise, its
// `then`, Object.freeze) is the language's own. It evaluates to [runner, toolsBuilder, freeze]:
//
// runner(value, settle): settles the activation with what the export's returned object resolves
// to (a promise, a thenable or a plain object: resolving reads its `then` once, as the language
// does), through the same promise jobs as `await`. A value that is no object settles directly
// (RunActivation): nothing it could resolve to is other than itself. `Promise` and `then` are
// captured before any flow code runs, so a flow cannot reroute them.
//
// toolsBuilder(host, list): builds the frozen `tools` object from [group, member, host-call name]
// bindings: tools.kv.get(args) is host.call("kv.get", args ?? {}). Properties are defined, never
// assigned, so a group named "__proto__" is a plain property; the objects have no prototype. Two
// mistakes an agent makes get a TypeError that says what to do instead of a denial or "not a
// function": arguments that are not one object (a positional call), and a name that is no tool of
// the policy (read through a proxy that throws naming it; `in` still tells whether a tool is there).
//
// freeze: Object.freeze, which Build applies to the host object.
(function () {
  const P = Promise;
  const then = P.prototype.then;
  const runner = function (value, settle) {
    const p = new P(function (resolve) { resolve(value); });
    then.call(p, function (v) { settle(true, v); }, function (e) { settle(false, e); });
  };
  const toolsBuilder = function (host, list) {
    const call = host.call;
    const define = Object.defineProperty;
    const tools = Object.create(null);
    for (const [group, member, name] of list) {
      if (!Object.prototype.hasOwnProperty.call(tools, group)) define(tools, group, {value: Object.create(null), enumerable: true});
      const path = "tools." + group + "." + member;
      const f = function (args) {
        if (arguments.length > 1 || (args !== undefined && (args === null || typeof args !== "object" || Array.isArray(args))))
          throw new TypeError(path + " takes one object of named arguments: " + path +
                              "({...}) (describe_tools gives their names)");
        return call(name, args === undefined ? {} : args);
      };
      define(f, "name", {value: member});
      define(tools[group], member, {value: f, enumerable: true});
    }
    const guard = function (target, path) {
      return new Proxy(target, {
        get: function (t, key, receiver) {
          if (typeof key !== "string" || key in t || key === "then" || key === "toJSON") return Reflect.get(t, key, receiver);
          throw new TypeError(path + "." + key + " is not a tool this policy grants (list_tools lists the tools)");
        }
      });
    };
    const groups = Object.create(null);
    for (const group of Object.keys(tools)) {
      Object.freeze(tools[group]);
      groups[group] = guard(tools[group], "tools." + group);
    }
    const top = Object.create(null);
    for (const group of Object.keys(groups)) define(top, group, {value: groups[group], enumerable: true});
    return guard(Object.freeze(top), "tools");
  };
  return [runner, toolsBuilder, Object.freeze];
})()
