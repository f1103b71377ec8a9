// Rich notebook displays of SDK objects, and live outputs (token streams, progress bars). They use the
// moelens kernel's bridge when it runs and do nothing special otherwise.
// The views of the data types register themselves when loaded (views.ts).
import "./tensor-view";
import "./router-view";
import "./expert-load-view";

export { TokenStream, type TokenStreamOptions, type StreamPiece } from "./token-stream";
export { ProgressBar } from "./progress";
export { LogitLensTable } from "./logit-lens-view";
