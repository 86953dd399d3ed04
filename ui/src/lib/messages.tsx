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
