// The `@anthropic-ai/sdk` npm client (client.messages) against a moestream
// server: a text answer, a tool_use and its tool_result sent back, the raw
// event stream, the client's stream helper with a tool, count_tokens and an
// error. Usage: node messages_test.mjs BASE_URL MODULE_DIR API_KEY
// (MODULE_DIR holds node_modules/@anthropic-ai/sdk). Prints "ok: ..." lines;
// exits 1 on the first failure.
import { createRequire } from 'node:module';
import path from 'node:path';

const [baseURL, moduleDir, apiKey] = process.argv.slice(2);
const require = createRequire(path.join(moduleDir, 'package.json'));
const sdk = require('@anthropic-ai/sdk');
const Anthropic = sdk.Anthropic ?? sdk.default ?? sdk;
const client = new Anthropic({ baseURL, apiKey });  // sends x-api-key

function check(cond, what, got) {
  if (!cond) {
    console.error(`FAIL: ${what}: ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const tools = [{
  name: 'get_weather', description: 'Weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const ask = { model: 'moestream', max_tokens: 200, temperature: 0 };

// Each request's prompt differs from the one before (the scripted model
// answers by the part of the prompt its cache did not hold).
const plain = await client.messages.create({ ...ask, system: 'Be nice.', messages: [{ role: 'user', content: 'Hi' }] });
check(plain.type === 'message' && plain.role === 'assistant', 'text: a message', plain);
check(plain.content.length === 1 && plain.content[0].type === 'text' && plain.content[0].text === 'Hello!', 'text: content', plain.content);
check(plain.stop_reason === 'end_turn', 'text: stop_reason end_turn', plain.stop_reason);
check(plain.usage.input_tokens > 0 && plain.usage.output_tokens > 0, 'text: usage', plain.usage);

const question = { role: 'user', content: 'Weather in Paris?' };
const called = await client.messages.create({ ...ask, tools, messages: [question] });
const use = called.content.find((b) => b.type === 'tool_use');
check(called.stop_reason === 'tool_use', 'tools: stop_reason tool_use', called);
check(use?.name === 'get_weather' && use.input.city === 'Paris', 'tools: tool_use block', called.content);

const back = await client.messages.create({
  ...ask, tools,
  messages: [question, { role: 'assistant', content: called.content },
             { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 C' }] }],
});
check(back.content[0]?.text === 'It is 21 C and sunny in Paris.' && back.stop_reason === 'end_turn',
      'tool_result round trip', back);

// The raw event stream.
const stream = await client.messages.create({ ...ask, stream: true, messages: [{ role: 'user', content: 'Hello there' }] });
const types = [];
let text = '', reason = null;
for await (const event of stream) {
  types.push(event.type);
  if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
  if (event.type === 'message_delta') reason = event.delta.stop_reason;
}
check(types[0] === 'message_start' && types.at(-1) === 'message_stop', 'stream: message_start .. message_stop', types);
check(types.indexOf('content_block_start') < types.indexOf('content_block_delta') &&
      types.lastIndexOf('content_block_delta') < types.indexOf('content_block_stop') &&
      types.indexOf('content_block_stop') < types.indexOf('message_delta'), 'stream: block events in order', types);
check(text === 'Hello!' && reason === 'end_turn', 'stream: text and stop_reason', { text, reason });

// The client's stream helper assembles the tool input from input_json_delta.
const helper = client.messages.stream({ ...ask, tools, messages: [{ role: 'user', content: 'Weather in Paris now?' }] });
const final = await helper.finalMessage();
const streamedUse = final.content.find((b) => b.type === 'tool_use');
check(final.stop_reason === 'tool_use' && streamedUse?.input?.city === 'Paris', 'stream helper: tool_use input', final);

const counted = await client.messages.countTokens({ model: 'moestream', tools, messages: [question] });
check(Number.isInteger(counted.input_tokens) && counted.input_tokens > 0, 'count_tokens', counted);

let refused = null;
try {
  await client.messages.create({ ...ask, temperature: 3, messages: [question] });
} catch (e) {
  refused = e;
}
check(refused?.status === 400 && refused?.error?.error?.type === 'invalid_request_error', 'a bad temperature: 400 invalid_request_error',
      { status: refused?.status, error: refused?.error });
console.log('all ok');
