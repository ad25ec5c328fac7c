// The `openai` npm client's Responses API (client.responses) against a
// moestream server: a text answer, a function call and its output sent back
// (with previous_response_id, and statelessly with the output items as
// input), the raw event stream, and the client's own stream helper.
// Usage: node responses_test.mjs BASE_URL MODULE_DIR API_KEY (MODULE_DIR
// holds node_modules/openai). Prints "ok: ..." lines; exits 1 on the first
// failure, 77 when this openai version has no Responses API.
import { createRequire } from 'node:module';
import path from 'node:path';

const [baseURL, moduleDir, apiKey] = process.argv.slice(2);
const require = createRequire(path.join(moduleDir, 'package.json'));
const OpenAI = require('openai');
const client = new OpenAI({ baseURL, apiKey });
if (!client.responses?.create) {
  console.log(`openai ${require('openai/package.json').version} has no Responses API`);
  process.exit(77);
}

function check(cond, what, got) {
  if (!cond) {
    console.error(`FAIL: ${what}: ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const tools = [{
  type: 'function', name: 'get_weather', description: 'Weather in a city', strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const ask = { model: 'moestream', temperature: 0, max_output_tokens: 200 };

// Each request's prompt differs from the one before (the scripted model
// answers by the part of the prompt its cache did not hold).
const plain = await client.responses.create({ ...ask, input: 'Hi', instructions: 'Be nice.' });
check(plain.object === 'response' && plain.status === 'completed', 'text: completed', plain);
check(plain.output_text === 'Hello!', 'text: output_text', plain.output);
check(plain.usage.input_tokens > 0 && plain.usage.output_tokens > 0, 'text: usage', plain.usage);

const called = await client.responses.create({ ...ask, input: 'Weather in Paris?', tools });
const call = called.output.find((o) => o.type === 'function_call');
check(call && call.name === 'get_weather', 'tools: a function_call item', called.output);
check(JSON.parse(call.arguments).city === 'Paris', 'tools: arguments', call);
check(called.output_text === '', 'tools: no text', called.output_text);

const back = await client.responses.create({
  ...ask, tools, previous_response_id: called.id,
  input: [{ type: 'function_call_output', call_id: call.call_id, output: '21 C' }],
});
check(back.output_text === 'It is 21 C and sunny in Paris.', 'function_call_output with previous_response_id', back.output);
const fetched = await client.responses.retrieve(back.id);
check(fetched.id === back.id && fetched.output[0]?.content?.[0]?.text === back.output_text, 'responses.retrieve', fetched);

// Stateless: the earlier output items go back as input, as agents send them.
const stateless = await client.responses.create({
  ...ask, tools, store: false,
  input: [{ role: 'user', content: 'Weather in Paris, please?' }, ...called.output,
          { type: 'function_call_output', call_id: call.call_id, output: '22 C' }],
});
check(stateless.output_text === 'It is 21 C and sunny in Paris.', 'output items sent back as input', stateless.output);

let missing = null;
try {
  await client.responses.create({ ...ask, previous_response_id: 'resp_nope', input: 'x' });
} catch (e) {
  missing = e;
}
check(missing?.status === 404, 'unknown previous_response_id: 404', missing?.message);

// The raw event stream.
const stream = await client.responses.create({ ...ask, input: 'Hello there', stream: true });
const types = [];
let text = '', final = null;
for await (const event of stream) {
  types.push(event.type);
  if (event.type === 'response.output_text.delta') text += event.delta;
  if (event.type === 'response.completed') final = event.response;
}
check(types[0] === 'response.created' && types[1] === 'response.in_progress', 'stream: created, in_progress', types);
check(types.at(-1) === 'response.completed', 'stream: completed last', types);
check(types.indexOf('response.output_item.added') < types.indexOf('response.content_part.added') &&
      types.indexOf('response.content_part.added') < types.indexOf('response.output_text.delta') &&
      types.lastIndexOf('response.output_text.delta') < types.indexOf('response.output_text.done') &&
      types.indexOf('response.output_text.done') < types.indexOf('response.content_part.done') &&
      types.indexOf('response.content_part.done') < types.indexOf('response.output_item.done'),
      'stream: item events in order', types);
check(text === 'Hello!' && final?.output?.[0]?.content?.[0]?.text === 'Hello!', 'stream: text', { text, final });

// The client's stream helper, with a call.
if (client.responses.stream) {
  const runner = client.responses.stream({ ...ask, input: 'Weather in Paris today?', tools });
  let args = '';
  runner.on('response.function_call_arguments.delta', (e) => { args += e.delta; });
  const done = await runner.finalResponse();
  const fc = done.output.find((o) => o.type === 'function_call');
  check(fc?.name === 'get_weather' && JSON.parse(fc.arguments).city === 'Paris', 'stream helper: function_call', done.output);
  check(JSON.parse(args).city === 'Paris', 'stream helper: arguments deltas', args);
}
console.log('all ok');
