// A handler module: the default export gets the job's input and the broker
// as ctx.host; what it returns becomes the result's value.
interface Input {
  name?: string;
}

export default async (input: Input, ctx: { host: any }) => {
  await ctx.host.log.info("greeting", { name: input?.name });
  return { greeting: `hello, ${input?.name ?? "world"}`, at: new Date(0).toISOString() };
};
