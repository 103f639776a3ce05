// sleep, waitForEvent and step: a durable run's waits and its unit of retry (docs/durable.md).
// Installed by web_timers.cpp: this file evaluates to a function that takes the worker's natives
// and the global object.
//
// Each is a host call (run.sleep, run.wait_event, run.step) that the parent journals. A sleep past
// a second or a wait parks the run: the parent lets this worker go and, when the run wakes, a new
// worker replays the run from its journal up to this call, whose answer it then gets. Nothing here
// holds state across that: the replay rebuilds it.
(function (natives, global) {
  'use strict';
  const { call, durable } = natives;
  const TypeErrorCtor = TypeError;
  const RangeErrorCtor = RangeError;
  const StringCtor = String;
  const defineProperty = Object.defineProperty;
  const isFinite = Number.isFinite;
  const kMaxMs = 31536000000;  // 365 days

  function needDurable(what) {
    if (!durable()) {
      throw new TypeErrorCtor(what + ' parks a durable run: only a flow whose manifest says "durable": true ' +
                              'may call it (docs/durable.md); in other flows use setTimeout within the deadline');
    }
  }

  function checkMs(what, ms) {
    if (typeof ms !== 'number' || !isFinite(ms) || ms < 0 || ms > kMaxMs) {
      throw new RangeErrorCtor(what + ' must be a number of milliseconds from 0 to ' + kMaxMs + ' (365 days)');
    }
  }

  async function sleep(ms) {
    needDurable('sleep()');
    checkMs('sleep(ms): ms', ms);
    await call('run.sleep', { ms });
  }

  // Resolves with {name, data, sender, received, id}; rejects with a TimeoutError after timeoutMs.
  async function waitForEvent(name, options) {
    needDurable('waitForEvent()');
    if (typeof name !== 'string') throw new TypeErrorCtor('waitForEvent(name): name must be a string');
    const args = { name };
    if (options !== undefined && options !== null) {
      if (typeof options !== 'object') {
        throw new TypeErrorCtor('waitForEvent(name, options): options must be an object {timeoutMs, key}');
      }
      if (options.timeoutMs !== undefined) {
        checkMs('waitForEvent(name, {timeoutMs}): timeoutMs', options.timeoutMs);
        args.timeout_ms = options.timeoutMs;
      }
      if (options.key !== undefined) {
        if (typeof options.key !== 'string') throw new TypeErrorCtor('waitForEvent(name, {key}): key must be a string');
        args.key = options.key;
      }
    }
    return await call('run.wait_event', args);
  }

  // Runs fn as one unit of retry: if the run fails and is retried, a step that returned is replayed
  // with its recorded calls, one that threw runs again from its start.
  async function step(name, fn) {
    needDurable('step()');
    if (typeof name !== 'string' || name.length === 0) throw new TypeErrorCtor('step(name, fn): name must be a non-empty string');
    if (typeof fn !== 'function') throw new TypeErrorCtor('step(name, fn): fn must be a function');
    await call('run.step', { name, phase: 'begin' });
    let value;
    try {
      value = await fn();
    } catch (e) {
      let message;
      try {
        message = StringCtor(e && e.message !== undefined ? e.message : e).slice(0, 1024);
      } catch (_) {
        message = 'a value that cannot be shown';
      }
      await call('run.step', { name, phase: 'end', ok: false, error: message });
      throw e;
    }
    await call('run.step', { name, phase: 'end', ok: true });
    return value;
  }

  function method(name, fn) {
    defineProperty(global, name, { value: fn, writable: true, enumerable: true, configurable: true });
  }
  method('sleep', sleep);
  method('waitForEvent', waitForEvent);
  method('step', step);
})
