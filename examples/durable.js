// A durable flow (docs/durable.md): if basal dies while it runs, `basal run --resume RUN` (or basal
// serve, at its next start) runs it again from the journal. The three increments are answered from
// the journal on the resume, not made again; the wait resumes where the clock left it.
export default async function (input, host) {
  const started = Date.now();
  for (let i = 0; i < 3; i++) await host.call("kv.incr", { namespace: "durable", key: "count" });
  await new Promise((resolve) => setTimeout(resolve, (input && input.wait_ms) || 1000));
  const count = await host.call("kv.get", { namespace: "durable", key: "count" });
  return { count, started };
}
