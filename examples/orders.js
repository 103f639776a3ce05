// Reads one order from the orders API. The API wants a token: the manifest's rule adds it, the
// script never holds it (docs/http.md).
export default async function (input) {
  const response = await fetch(`http://127.0.0.1:18431/orders/${input.id}`);
  if (!response.ok) throw new Error(`the orders API answered ${response.status}`);
  return await response.json();
}
