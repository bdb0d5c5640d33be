package api

// APIVersion is the version of the socket API in its paths (/v1/...).
const APIVersion = "v1"
