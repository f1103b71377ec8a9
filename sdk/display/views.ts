// Notebook views by data type. Each view registers for the class it draws (sdk/display/index.ts loads
// them all), so the data classes (tensors, traces) show themselves without depending on their views.

/** MIME type -> data, as a notebook frontend renders it. */
export type MimeBundle = Record<string, unknown>;

type View = (value: object) => MimeBundle;

const views = new Map<object, View>();

/** Draws instances of `type` (and of its subclasses without a view of their own) with `view`. */
export function registerView<T extends object>(type: abstract new (...args: never[]) => T, view: (value: T) => MimeBundle): void {
  views.set(type, view as View);
}

/** The bundle of the view registered for `value`'s class or its nearest base class; plain text without one. */
export function viewMimeBundle(value: object): MimeBundle {
  for (let proto = Object.getPrototypeOf(value); proto !== null; proto = Object.getPrototypeOf(proto)) {
    const view = views.get(proto.constructor);
    if (view) return view(value);
  }
  return { "text/plain": `<${value.constructor?.name ?? "object"}>` };
}
