// Text in, text out from a script: tokenize, stream a completion, then chat.
//
//   npx tsx docs/examples/generate.ts [model-dir]
//   npx ts-node docs/examples/generate.ts [model-dir]
//
// Without a folder it uses the embedded model.
import { load } from "moelens";

async function main(): Promise<void> {
  const model = await load(process.argv[2]);
  const tok = model.tokenizer;
  if (!tok) throw new Error(`${model.dir} has no tokenizer.json`);

  // Tokens and where they come from in the text.
  const text = "The jury said 😀";
  const { ids, offsets } = tok.encodeWithOffsets(text);
  console.log(ids.map((id, i) => `${id}:${JSON.stringify(text.slice(...offsets[i]))}`).join(" "));
  console.log(tok.decode(ids) === text);

  // A completion, streamed. The session keeps the text, so a second generate() continues it.
  const session = model.session();
  const options = { maxTokens: 30, temperature: 0.8, topP: 0.95, seed: 1 };
  for await (const chunk of session.generate("The jury said", options)) {
    process.stdout.write(chunk.text);
    if (chunk.timings) {
      const t = chunk.timings;
      console.log(`\n[${chunk.finishReason}: ${t.generatedTokens} tokens, ${t.decodeTokensPerSecond.toFixed(1)} tok/s]`);
    }
  }

  // A chat: each send() feeds only the new turn. The AbortSignal cancels a reply.
  const chat = model.conversation({ system: "You are terse.", enableThinking: false });
  const cancel = new AbortController();
  setTimeout(() => cancel.abort(), 30_000).unref();
  for (const question of ["Name three colours.", "And three animals?"]) {
    console.log(`> ${question}`);
    for await (const chunk of chat.send(question, { maxTokens: 20, signal: cancel.signal })) {
      process.stdout.write(chunk.text);
    }
    console.log(`\n[fed ${chat.promptTokensFed} new prompt tokens]`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
