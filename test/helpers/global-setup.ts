// Placeholder: replaced by the database template setup.
export default function setup(): void {}
