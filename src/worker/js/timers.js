// setTimeout, clearTimeout, setInterval, clearInterval for flows (HTML "timers", where they apply).
// Installed by web_timers.cpp: this file evaluates to a function that takes the worker's natives
// and the global object.
//
// The timers live here, in a queue ordered by due time, then by the order they were scheduled.
// Waiting is the parent's: when the script has nothing left to run, the engine calls `idle`
// (script_host.h AddIdleHook), which runs ONE due timer, or else asks the parent for a
// `timer.sleep` until the earliest one is due. Only one sleep is ever wanted at a time (the parent
// answers an older one at once when a newer one comes), so 10,000 pending timers cost one call in
// flight, not 10,000. A sleep is a background call: a pending timer does not keep an activation
// alive, and when the activation ends its timers are dropped (`ended`), never carried into the
// next activation on the same worker.
(function (natives, global) {
  'use strict';
  const { sleep, activationId, fail, now, onIdle, onActivationEnd } = natives;
  // Captured before any flow code runs: a flow that replaces these hurts nobody but itself, and
  // the activation-end hook (which runs with no CPU budget) calls none of them anyway.
  const MapCtor = Map;
  const mapGet = Map.prototype.get;
  const mapSet = Map.prototype.set;
  const mapDelete = Map.prototype.delete;
  const apply = Reflect.apply;
  const then = Promise.prototype.then;
  const TypeErrorCtor = TypeError;
  const ErrorCtor = Error;
  const defineProperty = Object.defineProperty;
  const { min, max, ceil } = Math;

  const kMaxDelayMs = 2147483647;
  let nextId = 1;  // never reset: an id kept from an earlier activation matches no new timer
  // The running activation's timers; null once it ended.
  let st = null;

  function fresh(activation) {
    return {
      activation,
      byId: new MapCtor(),  // id -> timer, for the timers not cleared
      heap: [],             // binary min-heap of timers by (due, seq); cleared ones are skipped
      size: 0,
      stale: 0,             // cleared timers still in the heap
      seq: 0,
      wakeAt: Infinity,     // when the sleep in flight ends (Infinity: none)
      wakeToken: 0,
    };
  }

  function current(what) {
    const a = activationId();
    if (a === 0) {
      throw new TypeErrorCtor(what + ': no activation is running (module top level has no timers; ' +
                              'set them inside the default export)');
    }
    if (st === null || st.activation !== a) st = fresh(a);
    return st;
  }

  function before(a, b) { return a.due < b.due || (a.due === b.due && a.seq < b.seq); }

  function heapPush(s, t) {
    const h = s.heap;
    let i = s.size++;
    h[i] = t;
    t.inHeap = true;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(h[i], h[p])) break;
      const x = h[i]; h[i] = h[p]; h[p] = x;
      i = p;
    }
  }

  function heapPop(s) {
    const h = s.heap;
    const top = h[0];
    top.inHeap = false;
    const last = h[--s.size];
    h[s.size] = undefined;
    if (s.size > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1, r = l + 1;
        let m = i;
        if (l < s.size && before(h[l], h[m])) m = l;
        if (r < s.size && before(h[r], h[m])) m = r;
        if (m === i) break;
        const x = h[i]; h[i] = h[m]; h[m] = x;
        i = m;
      }
    }
    if (s.size === 0) s.heap = [];
    return top;
  }

  // The earliest timer not cleared, left in the heap.
  function peek(s) {
    while (s.size > 0 && s.heap[0].cleared) {
      heapPop(s);
      s.stale--;
    }
    return s.size > 0 ? s.heap[0] : null;
  }

  // Rebuilds the heap without its cleared timers once they outnumber the live ones, so a script
  // that sets and clears timers in a loop holds only what is pending.
  function compact(s) {
    if (s.stale <= 64 || s.stale <= s.size - s.stale) return;
    const live = [];
    for (let i = 0; i < s.size; i++) if (!s.heap[i].cleared) live[live.length] = s.heap[i];
    s.heap = [];
    s.size = 0;
    s.stale = 0;
    for (let i = 0; i < live.length; i++) heapPush(s, live[i]);
  }

  function schedule(what, handler, timeout, args, repeat) {
    if (typeof handler !== 'function') {
      throw new TypeErrorCtor(what + ': the callback must be a function (a string would need eval, ' +
                              'which flows do not have)');
    }
    // HTML: the delay is a WebIDL long (ToInt32: NaN is 0, 2^31 wraps to -2^31), and a negative
    // one is 0. An interval of 0 would make the parent answer sleeps in a busy loop: 1 ms at least.
    let ms = timeout | 0;
    if (ms < 0) ms = 0;
    if (repeat && ms < 1) ms = 1;
    const s = current(what);
    const id = nextId;
    nextId = nextId >= kMaxDelayMs ? 1 : nextId + 1;
    const t = { id, due: now() + ms, seq: s.seq++, handler, args, interval: repeat ? ms : -1, cleared: false,
                inHeap: false };
    apply(mapSet, s.byId, [id, t]);
    heapPush(s, t);
    return id;
  }

  function clear(id) {
    const s = st;
    if (s === null || s.activation !== activationId()) return;
    const key = id | 0;
    const t = apply(mapGet, s.byId, [key]);
    if (t === undefined) return;
    apply(mapDelete, s.byId, [key]);
    t.cleared = true;
    if (t.inHeap) {
      s.stale++;
      compact(s);
    }
  }

  function wokeUp(s, token) {
    return function () {
      if (s.wakeToken === token) s.wakeAt = Infinity;
    };
  }

  function sleepFailed(s, token) {
    return function (e) {
      if (s.wakeToken !== token) return;
      s.wakeAt = Infinity;
      const err = new ErrorCtor('timers: the parent refused timer.sleep: ' + (e && e.message));
      defineProperty(err, 'cause', { value: e, writable: true, configurable: true });
      fail(err);
    };
  }

  // The engine's idle hook: runs the earliest due timer (true), or makes sure a sleep is in flight
  // that ends when it is due (false).
  function idle() {
    const s = st;
    if (s === null || s.activation !== activationId()) return false;
    const t = peek(s);
    if (t === null) return false;
    const at = now();
    if (t.due > at) {
      if (t.due < s.wakeAt) {
        const ms = min(kMaxDelayMs, max(0, ceil(t.due - at)));
        const token = ++s.wakeToken;
        const p = sleep('timer.sleep', { ms });
        s.wakeAt = at + ms;
        apply(then, p, [wokeUp(s, token), sleepFailed(s, token)]);
      }
      return false;
    }
    heapPop(s);
    if (t.interval < 0) {
      apply(mapDelete, s.byId, [t.id]);
      t.cleared = true;  // clearTimeout of a timer that fired finds nothing
    }
    try {
      apply(t.handler, global, t.args);
    } catch (e) {
      // An uncaught exception in a timer callback ends the activation as script_error, as a
      // rejection of the export does: nobody else could catch it.
      fail(e);
      return true;
    }
    if (t.interval >= 0 && !t.cleared && st === s) {
      t.due = now() + t.interval;
      t.seq = s.seq++;
      heapPush(s, t);
    }
    return true;
  }

  function ended() { st = null; }

  onIdle(idle);
  onActivationEnd(ended);

  function method(name, fn) {
    defineProperty(fn, 'name', { value: name });
    defineProperty(global, name, { value: fn, writable: true, enumerable: true, configurable: true });
  }
  method('setTimeout', function (handler, timeout = 0, ...args) {
    return schedule('setTimeout', handler, timeout, args, false);
  });
  method('setInterval', function (handler, timeout = 0, ...args) {
    return schedule('setInterval', handler, timeout, args, true);
  });
  method('clearTimeout', function (id = 0) { clear(id); });
  method('clearInterval', function (id = 0) { clear(id); });
})
