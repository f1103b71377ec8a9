// Hook point names and patterns on the TypeScript side: the same glob as the core's
// (hook_pattern_matches), used to refuse a capture that names nothing before any native work.
import type { NativeModel } from "../native";
import type { HookPoint } from "./hook-point";

const listed = new WeakMap<NativeModel, HookPoint[]>();

/** A model's hook points (asked of the core once per model). */
export function hookPointsOf(model: NativeModel): HookPoint[] {
  let points = listed.get(model);
  if (!points) listed.set(model, (points = model.hookPoints()));
  return points;
}

/** `*` matches any run of characters other than '.'; an opt-in point is matched only with its last segment written out. */
export function patternMatches(pattern: string, point: HookPoint): boolean {
  const regex = new RegExp(`^${pattern.split("*").map(escape).join("[^.]*")}$`);
  if (!regex.test(point.name)) return false;
  return !point.optIn || !pattern.slice(pattern.lastIndexOf(".") + 1).includes("*");
}

function escape(s: string): string {
  return s.replace(/[.+?^${}()|[\]\\]/g, "\\$&");
}
