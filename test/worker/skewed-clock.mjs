// Preloaded (node --import) into a worker process to run its wall clock TEST_CLOCK_OFFSET_MS off the server's,
// as on a machine whose clock is set wrong: Date.now() and new Date() move, performance.now() does not.
const offset = Number(process.env.TEST_CLOCK_OFFSET_MS ?? 0);
const RealDate = Date;

function SkewedDate(...args) {
  const date = args.length === 0 ? new RealDate(RealDate.now() + offset) : new RealDate(...args);
  return new.target ? date : date.toString();
}
SkewedDate.prototype = RealDate.prototype;
SkewedDate.now = () => RealDate.now() + offset;
SkewedDate.parse = RealDate.parse;
SkewedDate.UTC = RealDate.UTC;

globalThis.Date = SkewedDate;
