// counter: module-level state persists across the activations of ONE worker (as in Cloudflare
// Workers) and is gone when that worker retires (after 256 activations, 10 minutes idle, a budget
// failure, or a crash). Use it as a cache, never as the truth: durable state belongs in kv.*.
//
//   build/release/bin/basal run examples/counter.js --manifest examples/counter.manifest.json \
//       --inputs examples/counter.jsonl
// prints "count" 1, 2, 3, ... because --concurrency 1 (the default) reuses one worker; with
// --concurrency 2 the activations spread over two workers, each with its own count.

// Evaluated once, when the worker loads the flow.
let count = 0;
const seen = [];

export default function (input) {
  count += 1;
  if (input?.name !== undefined) seen.push(String(input.name));
  return { count, seen_by_this_worker: seen.slice(-5) };
}
