// slow: waits `input.ms` milliseconds (default 30000) before it returns, with no host call. For
// trying what basal serve does with work in flight: a full queue, a drain, a crash and a restart
// (docs/serve.md, "Accepted work is never lost").
export default async function (input) {
  const ms = input?.ms ?? 30000;
  await new Promise((resolve) => setTimeout(resolve, ms));
  return { slept_ms: ms };
}
