export const greet = (greeting: string, name: string): string => `${greeting}, ${name}`;
