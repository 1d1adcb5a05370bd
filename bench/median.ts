/** The middle value (the upper one of an even count): what every repeated measurement of the benchmark reports. */
export const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
