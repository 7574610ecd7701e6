// @hey-api/openapi-ts (npm run generate): a fetch client and SDK generated
// from the committed spec, with zod schemas the SDK checks every response
// body against, so an answer the document does not describe throws.
export default {
  input: "../openapi.json",
  output: { path: "gen/hey-api", importFileExtension: ".js" },
  plugins: [
    "@hey-api/client-fetch",
    "zod",
    { name: "@hey-api/sdk", validator: { response: "zod" } },
  ],
};
