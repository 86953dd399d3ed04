/**
 * Chat messages as bubbles, as text only: everything here comes from clients (trajectories, trace
 * inputs), so nothing is ever rendered as HTML.
 */

interface Message {
  role: string;
  text: string;
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (part && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string' ? (part as { text: string }).text : JSON.stringify(part)))
      .join('\n');
  }
  if (content === null || content === undefined) return '';
  return JSON.stringify(content, null, 2);
}

/** One item of an OpenAI-shaped list: a message, or a Choice whose message it holds. */
export function toMessage(item: unknown): Message | undefined {
  if (!item || typeof item !== 'object') return undefined;
  const o = item as Record<string, unknown>;
  const m = (o.message && typeof o.message === 'object' ? o.message : o) as Record<string, unknown>;
  if (typeof m.role !== 'string') return undefined;
  let text = contentText(m.content);
  if (Array.isArray(m.tool_calls) && m.tool_calls.length) text += (text ? '\n' : '') + JSON.stringify(m.tool_calls, null, 2);
  return { role: m.role, text };
}

/** The messages of a value when it is a list of chat messages, else undefined. */
export function asMessages(value: unknown): Message[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const out = value.map(toMessage);
  return out.every((m) => m !== undefined) ? (out as Message[]) : undefined;
}

export function Messages(props: { messages: Message[] }) {
  return (
    <div class="messages">
      {props.messages.map((m, i) => (
        <div key={i} class={`bubble bubble-${m.role}`}>
          <div class="role">{m.role}</div>
          <pre>{m.text}</pre>
        </div>
      ))}
    </div>
  );
}

function Json(props: { value: unknown }) {
  return <pre class="json">{JSON.stringify(props.value, null, 2)}</pre>;
}

/**
 * A call's inputs and output: chat `messages` in the inputs and `choices[0].message` in the output as
 * bubbles, anything else as JSON text.
 */
export function CallPayloads(props: { call: { inputs?: unknown; output?: unknown } }) {
  const { inputs, output } = props.call;
  const inputMessages = asMessages((inputs as { messages?: unknown } | undefined)?.messages);
  const outputChoice = (output as { choices?: unknown[] } | undefined)?.choices?.[0];
  const outputMessage = outputChoice ? toMessage(outputChoice) : undefined;
  return (
    <>
      <h3>Inputs</h3>
      {inputMessages ? <Messages messages={inputMessages} /> : <Json value={inputs} />}
      <h3>Output</h3>
      {outputMessage ? <Messages messages={[outputMessage]} /> : <Json value={output} />}
    </>
  );
}
