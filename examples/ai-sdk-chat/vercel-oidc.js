// A stand-in for @vercel/oidc, which the SDK's gateway provider imports
// and only a server calling Vercel's AI Gateway uses: the package is
// CommonJS, which a browser cannot import, and the chat never calls it.
const unavailable = () => {
  throw new Error('@vercel/oidc is not available in this page');
};
export const getContext = () => ({});
export const getVercelOidcToken = unavailable;
