// hello: the smallest useful flow. It logs (console.* becomes a `log` host call, journaled, no
// grant needed), stores its input through a granted host call, and returns a greeting.
//
//   build/release/bin/basal run examples/hello.js --manifest examples/hello.manifest.json \
//       --input '{"name":"operator"}'
export default async function (input, host) {
  console.log("hi");
  await host.call("kv.put", { namespace: "greetings", key: "last", value: input });
  return { greeting: "hello " + (input?.name ?? "world") };
}
